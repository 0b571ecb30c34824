"""BM25: the in-memory and SQL backends agree with each other and with an independent implementation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import bm25s
import numpy as np
import pytest
import sqlalchemy as sa

from citeline.engine import Citeline
from citeline.ingest import IngestOptions
from citeline.retrieve.filters import Filters
from citeline.retrieve.search import read_catalog
from citeline.store import catalog
from citeline.store.keyword import K1, B, MemoryKeywordIndex, SqlKeywordIndex
from tests.conftest import write

TEXTS = {
    "statins.txt": "Statins lower LDL-C. High LDL-C raises cardiovascular risk in FH patients.",
    "aspirin.txt": "Aspirin lowers the risk of a second myocardial infarction; aspirin also thins blood.",
    "diet.txt": "A Mediterranean diet lowers cardiovascular risk and LDL cholesterol modestly.",
    "exercise.txt": "Regular exercise improves insulin sensitivity and lowers blood pressure.",
    "sleep.txt": "Short sleep raises blood pressure, insulin resistance and cardiovascular risk.",
}
QUERIES = [
    "LDL-C in FH",
    "cardiovascular risk",
    "blood pressure insulin",
    "aspirin infarction risk",
    "nothing matches zzz",
]


NO_FILTERS = Filters()


def _both(
    cl: Citeline, memory: MemoryKeywordIndex, query: str, filters: Filters = NO_FILTERS
) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    where, params = filters.sql()
    terms = cl.analyzer.term_counts(query)
    with cl.engine.connect() as conn:
        scope = read_catalog(conn, cl.embedder.model_id, filters).scope
        ids = scope.document_ids if scope else None
        args: dict[str, Any] = {"where": where, "params": params, "document_ids": ids, "limit": 50}
        return SqlKeywordIndex().search(conn, terms, **args), memory.search(conn, terms, **args)


def _assert_same(sql: list[tuple[int, float]], mem: list[tuple[int, float]]) -> None:
    assert [c for c, _ in sql] == [c for c, _ in mem]
    assert [s for _, s in sql] == pytest.approx([s for _, s in mem], rel=1e-6)


@pytest.fixture
def indexed(cl: Citeline, tmp_path: Path) -> Citeline:
    paths = [write(tmp_path / name, text) for name, text in TEXTS.items()]
    cl.ingest(paths[:3], IngestOptions(scopes=("cardio",)))
    cl.ingest(paths[3:])
    return cl


def test_memory_and_sql_backends_give_identical_scores(indexed: Citeline) -> None:
    memory = MemoryKeywordIndex()
    for query in QUERIES:
        _assert_same(*_both(indexed, memory, query))
        _assert_same(*_both(indexed, memory, query, Filters(scopes=("cardio",))))
    sql, _ = _both(indexed, memory, "LDL-C in FH")
    assert sql  # the queries do match something


def test_memory_backend_follows_new_versions_and_deletes(indexed: Citeline, tmp_path: Path) -> None:
    memory = MemoryKeywordIndex()
    _assert_same(*_both(indexed, memory, "aspirin"))  # loaded now
    write(tmp_path / "aspirin.txt", "Aspirin: no longer advised for primary prevention in the elderly.")
    indexed.ingest([tmp_path / "aspirin.txt"])
    doomed = next(d for d in indexed.documents() if d.name == "sleep.txt")
    indexed.delete(str(doomed.id))
    for query in [*QUERIES, "elderly prevention", "sleep"]:
        _assert_same(*_both(indexed, memory, query))
    assert _both(indexed, memory, "short sleep")[1] == []


def test_a_log_trimmed_past_the_memory_backend_makes_it_reload(
    indexed: Citeline, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = MemoryKeywordIndex()
    _assert_same(*_both(indexed, memory, "aspirin"))  # loaded now
    monkeypatch.setattr(catalog, "KEYWORD_LOG_KEEP", 1)
    write(tmp_path / "aspirin.txt", "Aspirin: no longer advised for primary prevention in the elderly.")
    write(tmp_path / "statins.txt", "Statins are first-line therapy for familial hypercholesterolaemia.")
    indexed.ingest([tmp_path / "aspirin.txt", tmp_path / "statins.txt"])
    with indexed.engine.connect() as conn:
        kept = conn.execute(sa.text("SELECT count(*) FROM keyword_log")).scalar_one()
    assert kept <= 2  # the entries this index had not read yet are gone
    for query in [*QUERIES, "elderly prevention", "familial hypercholesterolaemia"]:
        _assert_same(*_both(indexed, memory, query))
    assert _both(indexed, memory, "second myocardial infarction")[1] == []


def test_scores_match_bm25s(indexed: Citeline) -> None:
    with indexed.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT id, text FROM chunks ORDER BY id")).all()
    corpus = [indexed.analyzer.terms(text) for _, text in rows]
    reference = bm25s.BM25(k1=K1, b=B, method="lucene")
    reference.index(corpus, show_progress=False)
    memory = MemoryKeywordIndex()
    for query in QUERIES[:4]:
        q = indexed.analyzer.terms(query)
        expected = reference.get_scores(q) * (K1 + 1)  # bm25s leaves out the constant (k1 + 1) factor
        _, ours = _both(indexed, memory, query)
        got = dict(ours)
        assert np.allclose([got.get(cid, 0.0) for cid, _ in rows], expected, rtol=1e-5)
