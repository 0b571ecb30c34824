"""BM25: the in-memory and SQL backends agree with each other and with an independent implementation."""

from __future__ import annotations

import importlib.util
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import bm25s
import numpy as np
import pytest
import sqlalchemy as sa

from citeline.engine import Citeline
from citeline.ingest import IngestOptions
from citeline.retrieve.filters import Filters
from citeline.retrieve.search import read_catalog
from citeline.settings import Settings
from citeline.store import catalog
from citeline.store.database import MIGRATIONS, schema_name
from citeline.store.index import VersionIds
from citeline.store.keyword import (
    K1,
    B,
    DocumentMatch,
    KeywordIndex,
    MemoryKeywordIndex,
    SqlKeywordIndex,
    top_chunks,
)
from tests.conftest import ingest_until_the_log_reaches, namespace_again, write


def _migration(name: str) -> ModuleType:
    path = next((MIGRATIONS / "versions").glob(f"*_{name}.py"))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


backfill = _migration("document_terms")._backfill

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


def test_a_scope_searched_again_after_the_index_reloads_sees_the_chunks_as_they_are_now(
    indexed: Citeline, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The memory index keeps its masks per scope (a process reuses a filter's scope while the catalog stays
    put): a scope with the same versions must not reuse masks of slots that a reload numbered anew."""
    memory = MemoryKeywordIndex()
    # A load numbers versions in id order: deleting the first leaves the scope of the others whole,
    # but moves each of them down a slot.
    first, *others = sorted(indexed.documents(), key=lambda d: d.version_id)
    scope = Filters(document_ids=tuple(d.id for d in others))
    for query in QUERIES:
        _assert_same(*_both(indexed, memory, query, scope))
    monkeypatch.setattr(catalog, "KEYWORD_LOG_KEEP", 1)  # the index cannot replay the log: it reloads
    indexed.delete(str(first.id))
    indexed.ingest([write(tmp_path / "fish.txt", "Oily fish twice a week lowers cardiovascular risk.")])
    for query in QUERIES:
        _assert_same(*_both(indexed, memory, query, scope))


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


# Documents of several overlapping chunks each, so whole-document BM25 differs from any chunk's.
LONG_TEXTS = {
    "statins.txt": "Statins lower LDL-C. High LDL-C raises cardiovascular risk in FH patients. "
    "Statin therapy for familial hypercholesterolaemia starts early. Muscle pain is the common side effect.",
    "aspirin.txt": "Aspirin lowers the risk of a second myocardial infarction. Aspirin also thins blood, "
    "so bleeding risk rises. Low-dose aspirin is no longer advised for primary prevention in the elderly.",
    "diet.txt": "A Mediterranean diet lowers cardiovascular risk and LDL cholesterol modestly. Olive oil "
    "and nuts replace butter. Blood pressure falls a little as salt intake drops.",
    "sleep.txt": "Short sleep raises blood pressure, insulin resistance and cardiovascular risk. Shift "
    "workers sleep least. Sleep apnoea adds to the risk and is often missed.",
}
DOCUMENT_QUERIES = [*QUERIES, "aspirin bleeding risk elderly", "sleep blood pressure cardiovascular"]
SMALL_CHUNKS = IngestOptions(chunk_size=90, chunk_overlap=40)


def _documents(
    cl: Citeline, index: KeywordIndex, query: str
) -> tuple[list[tuple[int, float]], list[DocumentMatch]]:
    where, params = NO_FILTERS.sql()
    with cl.engine.connect() as conn:
        return index.search_with_documents(
            conn, cl.analyzer.term_counts(query), where=where, params=params, document_ids=None, limit=50
        )


def _assert_documents_match_bm25s(cl: Citeline, memory: MemoryKeywordIndex, texts: dict[str, str]) -> None:
    """Both backends score whole documents as bm25s does over the documents' full texts, and each
    match's best chunk is its document's best chunk by chunk-level BM25."""
    with cl.engine.connect() as conn:
        versions: dict[str, uuid.UUID] = {
            r[0]: r[1] for r in conn.execute(sa.text("SELECT name, id FROM documents WHERE is_active"))
        }
        chunk_version = {r[0]: r[1] for r in conn.execute(sa.text("SELECT id, document_id FROM chunks"))}
    assert sorted(versions) == sorted(texts)
    names = sorted(texts)
    reference = bm25s.BM25(k1=K1, b=B, method="lucene")
    reference.index([cl.analyzer.terms(texts[name]) for name in names], show_progress=False)
    for query in DOCUMENT_QUERIES:
        expected = reference.get_scores(cl.analyzer.terms(query)) * (K1 + 1)
        want = sorted(
            ((versions[n], float(s)) for n, s in zip(names, expected, strict=True) if s > 0),
            key=lambda item: (-item[1], item[0]),
        )
        for index in (memory, SqlKeywordIndex()):
            chunks, documents = _documents(cl, index, query)
            assert [m.version_id for m in documents] == [v for v, _ in want]
            assert [m.score for m in documents] == pytest.approx([s for _, s in want], rel=1e-5)
            for match in documents:
                of_document = [cid for cid, _ in chunks if chunk_version[cid] == match.version_id]
                assert match.best_chunk == of_document[0]


@pytest.fixture
def long_documents(cl: Citeline, tmp_path: Path) -> Citeline:
    cl.ingest([write(tmp_path / name, text) for name, text in LONG_TEXTS.items()], SMALL_CHUNKS)
    return cl


def test_document_scores_match_bm25s_on_whole_documents(long_documents: Citeline) -> None:
    with long_documents.engine.connect() as conn:
        chunks = conn.execute(sa.text("SELECT count(*) FROM chunks")).scalar_one()
    assert chunks >= 3 * len(LONG_TEXTS)  # every document is several overlapping chunks
    _assert_documents_match_bm25s(long_documents, MemoryKeywordIndex(), LONG_TEXTS)
    _, documents = _documents(long_documents, MemoryKeywordIndex(), "aspirin bleeding risk elderly")
    assert documents[0].score > 0 and len(documents) == len(LONG_TEXTS)  # "risk" is in every one


def test_document_scores_follow_a_version_swap_and_a_delete(long_documents: Citeline, tmp_path: Path) -> None:
    memory = MemoryKeywordIndex()
    _assert_documents_match_bm25s(long_documents, memory, LONG_TEXTS)  # loaded now
    texts = dict(LONG_TEXTS)
    texts["aspirin.txt"] = (
        "Aspirin: no longer advised for primary prevention in the elderly, whose bleeding risk is high."
    )
    long_documents.ingest([write(tmp_path / "aspirin.txt", texts["aspirin.txt"])], SMALL_CHUNKS)
    doomed = next(d for d in long_documents.documents() if d.name == "sleep.txt")
    long_documents.delete(str(doomed.id))
    del texts["sleep.txt"]
    _assert_documents_match_bm25s(long_documents, memory, texts)
    assert _documents(long_documents, memory, "shift workers apnoea")[1] == []
    with long_documents.engine.connect() as conn:
        totals = conn.execute(sa.text("SELECT document_count, document_token_total FROM corpus_stats")).one()
        stored = conn.execute(sa.text("SELECT count(*) FROM document_terms")).scalar_one()
    assert tuple(totals) == (len(texts), sum(len(long_documents.analyzer.terms(t)) for t in texts.values()))
    assert stored == sum(len(long_documents.analyzer.term_counts(t)) for t in texts.values())


def test_stores_indexed_before_document_terms_get_them_from_their_chunks(long_documents: Citeline) -> None:
    with long_documents.engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM document_terms"))
        conn.execute(sa.text("UPDATE documents SET keyword_length = NULL"))
        conn.execute(sa.text("UPDATE corpus_stats SET document_count = 0, document_token_total = 0"))
        backfill(conn)
    _assert_documents_match_bm25s(long_documents, MemoryKeywordIndex(), LONG_TEXTS)


def test_document_terms_are_loaded_only_once_document_matches_are_asked_for(
    long_documents: Citeline, tmp_path: Path
) -> None:
    memory = MemoryKeywordIndex()
    chunk_only = _both(long_documents, memory, "aspirin")  # weight_document 0: chunk postings only
    _assert_same(*chunk_only)
    assert memory.memory()["chunk_postings"] > 0
    assert memory.memory()["document_terms"] == 0
    # Versions swapped and deleted before document terms were ever loaded are loaded as they are now.
    texts = dict(LONG_TEXTS)
    texts["aspirin.txt"] = "Aspirin: no longer advised for primary prevention in the elderly."
    long_documents.ingest([write(tmp_path / "aspirin.txt", texts["aspirin.txt"])], SMALL_CHUNKS)
    doomed = next(d for d in long_documents.documents() if d.name == "diet.txt")
    long_documents.delete(str(doomed.id))
    del texts["diet.txt"]
    _assert_same(*_both(long_documents, memory, "aspirin elderly"))
    assert memory.memory()["document_terms"] == 0

    _assert_documents_match_bm25s(long_documents, memory, texts)

    assert memory.memory()["document_terms"] > 0
    # From then on each new version brings its document terms.
    texts["sleep.txt"] = "Sleep debt, not short sleep alone, predicts hypertension in shift workers."
    long_documents.ingest([write(tmp_path / "sleep.txt", texts["sleep.txt"])], SMALL_CHUNKS)
    _assert_documents_match_bm25s(long_documents, memory, texts)


def test_warm_up_with_documents_loads_document_terms(long_documents: Citeline) -> None:
    memory = MemoryKeywordIndex()
    with long_documents.engine.connect() as conn:
        memory.warm_up(conn)
        assert memory.memory()["document_terms"] == 0
        memory.warm_up(conn, documents=True)
    assert memory.memory()["document_terms"] > 0
    _assert_documents_match_bm25s(long_documents, memory, LONG_TEXTS)


# --- snapshots shared between processes -----------------------------------------------------------


def _snapshot_index(root: Path) -> MemoryKeywordIndex:
    # Every store here is tiny: a snapshot is written whatever the size.
    return MemoryKeywordIndex(root, snapshot_min_postings=1)


def _snapshot_dirs(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def test_a_second_index_maps_the_snapshot_the_first_wrote_and_follows_later_changes(
    indexed: Citeline, tmp_path: Path
) -> None:
    root = tmp_path / "snapshots"
    first = _snapshot_index(root)
    _assert_same(*_both(indexed, first, "aspirin"))
    assert first.source == "catalog"
    [written] = _snapshot_dirs(root)
    assert first.memory()["shared"] > 0  # the loader maps what it wrote instead of keeping a copy

    second = _snapshot_index(root)
    for query in QUERIES:
        _assert_same(*_both(indexed, second, query))
        _assert_same(*_both(indexed, second, query, Filters(scopes=("cardio",))))
    assert second.source == str(written)
    assert second.memory()["shared"] == first.memory()["shared"] > 0

    write(tmp_path / "aspirin.txt", "Aspirin: no longer advised for primary prevention in the elderly.")
    indexed.ingest([tmp_path / "aspirin.txt"])
    doomed = next(d for d in indexed.documents() if d.name == "sleep.txt")
    indexed.delete(str(doomed.id))
    third = _snapshot_index(root)  # starts after the changes: maps the snapshot, then replays the log
    for memory in (first, second, third):
        for query in [*QUERIES, "elderly prevention", "sleep"]:
            _assert_same(*_both(indexed, memory, query))
        assert _both(indexed, memory, "short sleep")[1] == []
    assert third.source == str(written)


def test_a_snapshot_of_another_stores_log_is_never_used(indexed: Citeline, tmp_path: Path) -> None:
    root = tmp_path / "snapshots"
    _both(indexed, _snapshot_index(root), "aspirin")
    other_settings = indexed.settings.model_copy(update={"namespace": f"t_{uuid.uuid4().hex[:12]}"})
    with Citeline(other_settings) as other:
        try:
            # As many log entries as the first store's, naming other documents.
            paths = [write(tmp_path / "other" / name, text[::-1]) for name, text in TEXTS.items()]
            other.ingest(paths[:3])
            other.ingest(paths[3:])
            memory = _snapshot_index(root)
            for query in [*QUERIES, "snoitaruas"]:
                _assert_same(*_both(other, memory, query))
            assert memory.source == "catalog"
        finally:
            with other.engine.begin() as conn:
                conn.execute(
                    sa.text(f'DROP SCHEMA IF EXISTS "{schema_name(other.settings.namespace)}" CASCADE')
                )


def test_compacting_writes_a_newer_snapshot_and_keeps_the_last_two(
    indexed: Citeline, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "snapshots"
    memory = _snapshot_index(root)
    _both(indexed, memory, "aspirin")
    monkeypatch.setattr(MemoryKeywordIndex, "MAX_SEGMENTS", 1)
    for i in range(3):
        write(tmp_path / f"extra{i}.txt", f"Extra note {i}: statins and aspirin in the elderly.")
        indexed.ingest([tmp_path / f"extra{i}.txt"])
        _assert_same(*_both(indexed, memory, "statins aspirin elderly"))  # replays, then compacts
    kept = _snapshot_dirs(root)
    assert len(kept) == 2
    with indexed.engine.connect() as conn:
        last = conn.execute(sa.text("SELECT max(seq) FROM keyword_log")).scalar_one()
    assert int(kept[-1].name.split("-")[0]) == last
    fresh = _snapshot_index(root)
    _assert_same(*_both(indexed, fresh, "statins aspirin elderly"))
    assert fresh.source == str(kept[-1])


def test_a_snapshot_folder_that_cannot_be_written_leaves_the_index_private(
    indexed: Citeline, tmp_path: Path
) -> None:
    blocked = write(tmp_path / "not-a-folder", "a file where the snapshot folder would go")
    memory = _snapshot_index(blocked / "snapshots")
    for query in QUERIES:
        _assert_same(*_both(indexed, memory, query))
    assert memory.source == "catalog"
    assert memory.memory()["shared"] == 0


# --- the filter's versions, packed -------------------------------------------------------------------


def test_packed_version_ids_read_back_as_the_ids_they_hold() -> None:
    ids = [uuid.uuid4() for _ in range(5)]
    packed = VersionIds.of(ids)
    assert len(packed) == 5 and list(packed) == ids and packed == ids
    assert packed[1] == ids[1] and packed[-1] == ids[-1] and list(packed[1:3]) == ids[1:3]
    hi, lo = packed.halves()
    assert [int(h) << 64 | int(low) for h, low in zip(hi, lo, strict=True)] == [i.int for i in ids]
    assert not VersionIds(b"")
    with pytest.raises(ValueError, match="16 bytes each"):
        VersionIds(b"x" * 17)


def test_a_filtered_keyword_search_keeps_exactly_the_versions_named(indexed: Citeline) -> None:
    memory = MemoryKeywordIndex()
    terms = indexed.analyzer.term_counts("cardiovascular risk blood pressure")
    by_name = {d.name: d.id for d in indexed.documents()}
    with indexed.engine.connect() as conn:
        versions = {
            name: conn.execute(
                sa.text("SELECT id FROM documents WHERE document_id = :d AND is_active"), {"d": doc}
            ).scalar_one()
            for name, doc in by_name.items()
        }

        def names(document_ids: Any) -> list[str]:
            found = memory.search(conn, terms, where="true", params={}, document_ids=document_ids, limit=50)
            rows = conn.execute(
                sa.text("SELECT c.id, d.name FROM chunks c JOIN documents d ON d.id = c.document_id")
            ).all()
            chunk_docs: dict[int, str] = {row[0]: row[1] for row in rows}
            return sorted(chunk_docs[c] for c, _ in found)

        kept = [versions["diet.txt"], versions["sleep.txt"], uuid.uuid4()]  # one unknown: ignored
        assert names(VersionIds.of(kept)) == names(kept) == ["diet.txt", "sleep.txt"]
        assert names(VersionIds(b"")) == []
        assert names(None) == sorted(TEXTS)  # unfiltered: each document says one of the words


def _sorted_top(
    scores: np.ndarray[Any, Any], allowed: np.ndarray[Any, Any], ids: np.ndarray[Any, Any], limit: int
) -> list[tuple[int, float]]:
    """The top by brute force: every allowed match sorted by score, then chunk id."""
    rows = [(int(ids[s]), float(scores[s])) for s in range(scores.size) if scores[s] > 0 and allowed[s]]
    return sorted(rows, key=lambda r: (-r[1], r[0]))[:limit]


@pytest.mark.parametrize("limit", [1, 7, 50])
def test_the_top_chunks_are_exact_however_the_best_scores_fall_in_the_sample(limit: int) -> None:
    rng = np.random.default_rng(limit)
    n = 20_000
    ids = rng.permutation(n).astype(np.int64) + 1000
    low = rng.uniform(0.1, 1.0, n)
    cases = {
        "random": rng.uniform(0, 5, n),
        # The best scores only where the sample (every eighth match) looks: it sees nothing else
        # above its cut, so the cut is not taken.
        "best in the sample": np.where(np.arange(n) % 8 == 0, low + 10, low),
        # The best scores only where the sample does not look.
        "best outside the sample": np.where(np.arange(n) % 8 == 3, low + 10, low),
        # Thousands tied at the cut: decided by chunk id, as the SQL backend does.
        "ties": np.round(rng.uniform(0, 3, n), 1),
        "few matches": np.where(rng.uniform(size=n) < 0.002, low, 0.0),
    }
    for name, scores in cases.items():
        for allowed in (np.ones(n, dtype=bool), rng.uniform(size=n) < 0.3):
            got = top_chunks(scores, allowed, ids, limit)
            assert got == _sorted_top(scores, allowed, ids, limit), name


def test_a_loaded_index_answers_without_a_connection_only_at_the_log_position_it_holds(
    indexed: Citeline, tmp_path: Path
) -> None:
    """A search runs the keyword stage in another thread (beside its dense stage) only through
    search_loaded, which must never need the connection: at any other position it says so instead."""
    memory, terms = MemoryKeywordIndex(), indexed.analyzer.term_counts("cardiovascular risk")

    def position() -> catalog.LogView:
        with indexed.engine.connect() as conn:
            return read_catalog(conn, indexed.embedder.model_id, NO_FILTERS).log

    args: dict[str, Any] = {"document_ids": None, "limit": 50}
    assert memory.search_loaded(terms, **args, log=position()) is None  # nothing loaded yet
    sql, mem = _both(indexed, memory, "cardiovascular risk")
    assert memory.search_loaded(terms, **args, log=position()) == (mem, [])
    assert SqlKeywordIndex().search_loaded(terms, **args, log=position()) is None
    # Document matches need the document terms, which only a search with a connection loads.
    assert memory.search_loaded(terms, **args, log=position(), documents=True) is None
    indexed.ingest([write(tmp_path / "fish.txt", "Oily fish lowers cardiovascular risk.")])
    assert memory.search_loaded(terms, **args, log=position()) is None  # the log moved on
    _assert_same(*_both(indexed, memory, "cardiovascular risk"))
    found = memory.search_loaded(terms, **args, log=position())
    assert found is not None and len(found[0]) == len(sql) + 1


def test_a_search_whose_snapshot_is_older_than_the_memory_backend_is_scored_by_postgresql(
    indexed: Citeline, tmp_path: Path
) -> None:
    """Another search synced the arrays past a commit this one's transaction began before: loading them
    back would cost every search a reload; PostgreSQL scores this one over its own snapshot instead."""
    memory = MemoryKeywordIndex()
    terms = indexed.analyzer.term_counts("aspirin prevention")
    args: dict[str, Any] = {"where": "TRUE", "params": {}, "document_ids": None, "limit": 50}
    with indexed.engine.connect().execution_options(isolation_level="REPEATABLE READ") as old:
        view = read_catalog(old, indexed.embedder.model_id, NO_FILTERS)  # the snapshot starts here
        indexed.ingest(
            [write(tmp_path / "elderly.txt", "Aspirin: not for primary prevention in the elderly.")]
        )
        with indexed.engine.connect() as new:
            now = read_catalog(new, indexed.embedder.model_id, NO_FILTERS)
            memory.warm_up(new)
        found = memory.search(old, terms, **args, log=view.log)
        _assert_same(SqlKeywordIndex().search(old, terms, **args), found)
        assert len(found) == 1  # aspirin.txt: elderly.txt is not in the old snapshot
    # The arrays stayed where the newer search left them: a search at that position needs no sync.
    loaded = memory.search_loaded(terms, document_ids=None, limit=50, log=now.log)
    assert loaded is not None and len(loaded[0]) == 2


def test_a_namespace_made_again_with_a_shorter_log_is_loaded_anew(
    indexed: Citeline, settings: Settings, tmp_path: Path
) -> None:
    """Its log restarted: a position below the arrays' is not an older snapshot of the same catalog."""
    memory = MemoryKeywordIndex()
    terms = indexed.analyzer.term_counts("salt blood pressure")
    args: dict[str, Any] = {"where": "TRUE", "params": {}, "document_ids": None, "limit": 50}
    with indexed.engine.connect() as conn:
        memory.warm_up(conn)
    with namespace_again(settings) as again:
        again.ingest([write(tmp_path / "again" / "salt.txt", "Less salt lowers blood pressure.")])
        with again.engine.connect() as conn:
            log = catalog.log_positions(conn)
            found = memory.search(conn, terms, **args, log=log)
            _assert_same(SqlKeywordIndex().search(conn, terms, **args), found)
        assert memory.search_loaded(terms, document_ids=None, limit=50, log=log) is not None


def test_a_namespace_made_again_whose_log_reaches_the_same_position_is_loaded_anew(
    indexed: Citeline, settings: Settings, tmp_path: Path
) -> None:
    """Another epoch's log at the arrays' very position is another catalog, not the one they hold."""
    memory = MemoryKeywordIndex()
    terms = indexed.analyzer.term_counts("salt blood pressure aspirin")
    args: dict[str, Any] = {"where": "TRUE", "params": {}, "document_ids": None, "limit": 50}
    with indexed.engine.connect() as conn:
        memory.warm_up(conn)
        position = catalog.log_positions(conn).last
    with namespace_again(settings) as again:
        ingest_until_the_log_reaches(again, tmp_path / "again", position)
        with again.engine.connect() as conn:
            log = catalog.log_positions(conn)
            assert memory.search_loaded(terms, document_ids=None, limit=50, log=log) is None
            found = memory.search(conn, terms, **args, log=log)
            _assert_same(SqlKeywordIndex().search(conn, terms, **args), found)
