"""Vectors held in the search process: exact, within any filter, in step with the catalog's versions and
deletes, and out of the way when the corpus does not fit their budget."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from numpy.typing import NDArray

from citeline.engine import Citeline
from citeline.ingest import IngestOptions
from citeline.retrieve.filters import Filters
from citeline.retrieve.search import Explain, SearchRequest, read_catalog
from citeline.settings import Settings
from citeline.store import catalog, memory_vectors
from citeline.store.index import InScope
from citeline.store.memory_vectors import MemoryVectors
from tests.conftest import ingest_until_the_log_reaches, namespace_again, write

TEXTS = {
    "statins.txt": "Statins lower LDL cholesterol and cut cardiovascular events in adults at high risk.",
    "aspirin.txt": "Low-dose aspirin prevents a second heart attack but raises the risk of bleeding.",
    "insulin.txt": "Basal insulin is titrated by fasting glucose; hypoglycaemia limits the dose.",
    "sleep.txt": "Short sleep is associated with weight gain and insulin resistance in adults.",
    "hygiene.txt": "Hand hygiene before and after patient contact reduces hospital infections.",
    "fish.txt": "Oily fish twice a week lowers triglycerides and the risk of sudden cardiac death.",
}
QUERIES = ["cholesterol and heart attacks", "blood sugar dose", "infection control", "sleep and weight"]
BUDGET = 64 << 20


@pytest.fixture
def indexed(cl: Citeline, tmp_path: Path) -> Citeline:
    paths = [write(tmp_path / name, text) for name, text in TEXTS.items()]
    cl.ingest(paths[:3], IngestOptions(scopes=("cardio",)))
    cl.ingest(paths[3:5], IngestOptions(scopes=("wards",)))
    cl.ingest(paths[5:])  # no scope: universal, in every scope
    return cl


def _vector(cl: Citeline, text: str) -> NDArray[np.float32]:
    return np.asarray(cl.embedder.embed([text])[0], dtype=np.float32)


def _exact(cl: Citeline, query: NDArray[np.float32], filters: Filters, k: int) -> list[tuple[int, float]]:
    """The ``k`` nearest active chunks within ``filters`` as PostgreSQL computes them, comparing every one."""
    where, params = filters.sql()
    with cl.engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT c.id, c.embedding <=> CAST(:q AS vector) AS distance FROM chunks c "
                f"JOIN documents d ON d.id = c.document_id WHERE {where} ORDER BY distance, c.id LIMIT :k"
            ),
            {**params, "q": str(query.tolist()), "k": k},
        ).all()
    return [(int(r[0]), float(r[1])) for r in rows]


def _memory(
    cl: Citeline, memory: MemoryVectors, query: NDArray[np.float32], filters: Filters, k: int
) -> list[tuple[int, float]] | None:
    with cl.engine.connect() as conn:
        scope = read_catalog(conn, cl.embedder.model_id, filters).scope
        return memory.search(conn, query, limit=k, scope=scope)


def _assert_same(exact: list[tuple[int, float]], found: list[tuple[int, float]] | None) -> None:
    assert found is not None
    assert [c for c, _ in found] == [c for c, _ in exact]
    assert [d for _, d in found] == pytest.approx([d for _, d in exact], abs=1e-5)


FILTERS = [
    Filters(),
    Filters(scopes=("cardio",)),
    Filters(scopes=("wards",)),
    Filters(scopes=("nowhere",)),  # the universal document only
    Filters(tags_any=("absent",)),  # nothing
]


def test_memory_search_finds_what_comparing_every_vector_finds_within_any_filter(indexed: Citeline) -> None:
    memory = MemoryVectors(indexed.embedder.model_id, BUDGET)
    for text in QUERIES:
        query = _vector(indexed, text)
        for filters in FILTERS:
            for k in (1, 3, 100):
                _assert_same(_exact(indexed, query, filters, k), _memory(indexed, memory, query, filters, k))
    universal = _memory(indexed, memory, _vector(indexed, "fish"), Filters(scopes=("nowhere",)), 10)
    assert universal and len(universal) == 1


def test_memory_search_follows_new_versions_and_deletes(indexed: Citeline, tmp_path: Path) -> None:
    memory = MemoryVectors(indexed.embedder.model_id, BUDGET)
    query = _vector(indexed, "aspirin and bleeding")
    _assert_same(_exact(indexed, query, Filters(), 10), _memory(indexed, memory, query, Filters(), 10))
    loaded = memory.rows
    # A new version of aspirin.txt replaces the old one; sleep.txt goes.
    write(tmp_path / "aspirin.txt", "Aspirin is no longer advised for primary prevention in the elderly.")
    indexed.ingest([tmp_path / "aspirin.txt"], IngestOptions(scopes=("cardio",)))
    sleep = next(d for d in indexed.documents() if d.name == "sleep.txt")
    indexed.delete(str(sleep.id))
    for text in [*QUERIES, "aspirin and bleeding", "elderly prevention"]:
        q = _vector(indexed, text)
        for filters in FILTERS:
            _assert_same(_exact(indexed, q, filters, 10), _memory(indexed, memory, q, filters, 10))
    assert memory.rows > loaded  # replayed: the new version's rows were added, not everything reloaded
    # Most rows dead: the arrays are compacted, and a later delete still retires the right rows.
    for name in ("statins.txt", "insulin.txt", "hygiene.txt"):
        indexed.delete(str(next(d for d in indexed.documents() if d.name == name).id))
    q = _vector(indexed, "heart")
    _assert_same(_exact(indexed, q, Filters(), 10), _memory(indexed, memory, q, Filters(), 10))
    assert memory.rows == 2  # aspirin.txt's new version and fish.txt, one chunk each
    indexed.delete(str(next(d for d in indexed.documents() if d.name == "fish.txt").id))
    for filters in FILTERS:
        _assert_same(_exact(indexed, q, filters, 10), _memory(indexed, memory, q, filters, 10))


def _described(cl: Citeline, query: NDArray[np.float32]) -> dict[int, tuple[uuid.UUID, str | None, float]]:
    """Each chunk of an active version: its version, content type and distance, as PostgreSQL has them."""
    with cl.engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT c.id, d.id, d.content_type, c.embedding <=> CAST(:q AS vector) FROM chunks c "
                "JOIN documents d ON d.id = c.document_id WHERE d.is_active"
            ),
            {"q": str(query.tolist())},
        ).all()
    return {int(r[0]): (r[1], r[2], float(r[3])) for r in rows}


def _held(
    cl: Citeline, memory: MemoryVectors, query: NDArray[np.float32], ids: list[int]
) -> dict[int, tuple[uuid.UUID, str | None, float]] | None:
    with cl.engine.connect() as conn:
        memory.search(conn, query, limit=1)  # brings the arrays to this snapshot
        held = memory.held(query, ids, catalog.log_positions(conn))
    if held is None:
        return None
    return {
        int(c): (v, t, float(d))
        for c, v, t, d in zip(held.ids, held.versions, held.content_types, held.distances, strict=True)
    }


def test_held_chunks_are_described_as_the_catalog_describes_them_through_versions_and_deletes(
    indexed: Citeline, tmp_path: Path
) -> None:
    """A search's candidates need no statement when the arrays are in step: each active chunk asked for
    comes back with the catalog's version, content type and distance; a retired or unknown one does not."""
    memory = MemoryVectors(indexed.embedder.model_id, BUDGET)
    query = _vector(indexed, "aspirin and bleeding")

    def check(asked: list[int]) -> None:
        truth = _described(indexed, query)
        held = _held(indexed, memory, query, asked)
        assert held is not None
        assert sorted(held) == sorted(c for c in set(asked) if c in truth)
        for cid, (version, content_type, distance) in held.items():
            assert (version, content_type) == truth[cid][:2]
            assert distance == pytest.approx(truth[cid][2], abs=1e-5)

    before = sorted(_described(indexed, query))
    check([*reversed(before), 10**9])
    write(tmp_path / "aspirin.txt", "Aspirin is no longer advised for primary prevention in the elderly.")
    indexed.ingest([tmp_path / "aspirin.txt"], IngestOptions(scopes=("cardio",)))
    indexed.delete(str(next(d for d in indexed.documents() if d.name == "sleep.txt").id))
    after = sorted(_described(indexed, query))
    assert set(before) - set(after)  # retired chunks: asked for, left out
    check(before + after)


def test_held_chunks_are_only_told_at_the_position_of_the_searchs_snapshot(
    indexed: Citeline, tmp_path: Path
) -> None:
    memory = MemoryVectors(indexed.embedder.model_id, BUDGET)
    query = _vector(indexed, "blood pressure")
    ids = sorted(_described(indexed, query))
    with indexed.engine.connect() as conn:
        log = catalog.log_positions(conn)
    assert memory.held(query, ids, log) is None  # nothing loaded
    assert _held(indexed, memory, query, ids) is not None
    indexed.ingest([write(tmp_path / "salt.txt", "Less salt lowers blood pressure.")])
    with indexed.engine.connect() as conn:
        newer = catalog.log_positions(conn)
    assert memory.held(query, ids, log) is not None  # the arrays are still where this log was
    assert memory.held(query, ids, newer) is None  # not yet at the newer one
    assert _held(indexed, memory, query, ids) is not None  # synced to it
    assert memory.held(query, ids, log) is None  # now past the older one
    assert memory.held(query, ids, newer._replace(epoch=uuid.uuid4())) is None


def test_memory_search_reloads_when_the_log_was_trimmed_past_it(
    indexed: Citeline, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = MemoryVectors(indexed.embedder.model_id, BUDGET)
    query = _vector(indexed, "heart")
    _assert_same(_exact(indexed, query, Filters(), 10), _memory(indexed, memory, query, Filters(), 10))
    monkeypatch.setattr(catalog, "KEYWORD_LOG_KEEP", 1)
    write(tmp_path / "salt.txt", "Less salt lowers blood pressure and the risk of stroke.")
    write(tmp_path / "walk.txt", "Walking daily lowers blood pressure in older adults.")
    indexed.ingest([tmp_path / "salt.txt", tmp_path / "walk.txt"])
    hygiene = next(d for d in indexed.documents() if d.name == "hygiene.txt")
    indexed.delete(str(hygiene.id))
    for filters in FILTERS:
        _assert_same(_exact(indexed, query, filters, 10), _memory(indexed, memory, query, filters, 10))


def test_a_corpus_over_the_budget_is_left_to_the_index(indexed: Citeline) -> None:
    with indexed.engine.connect() as conn:
        chunks = int(conn.execute(sa.text("SELECT chunk_count FROM corpus_stats WHERE id = 1")).scalar_one())
    dim = indexed.embedder.dimension
    query = _vector(indexed, "heart")
    assert (
        _memory(indexed, MemoryVectors(indexed.embedder.model_id, chunks * dim * 4 - 1), query, Filters(), 5)
        is None
    )
    fits = MemoryVectors(indexed.embedder.model_id, chunks * dim * 4)
    _assert_same(_exact(indexed, query, Filters(), 5), _memory(indexed, fits, query, Filters(), 5))
    # Through a search: 1 MB holds about 680 vectors of 384 dimensions, far more than these chunks.
    explain = Explain()
    indexed.search(SearchRequest("heart"), explain=explain)
    assert explain.dense_plan == "memory"
    with indexed.derive(memory_vectors_mb=0) as off:
        off.search(SearchRequest("heart"), explain=explain)
    assert explain.dense_plan == "hnsw"


def test_searches_go_to_the_index_while_another_loads_every_vector(
    indexed: Citeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full load holds the arrays' lock for seconds at a large corpus: the other searches meanwhile are
    answered by the index instead of waiting for it."""
    memory = MemoryVectors(indexed.embedder.model_id, BUDGET)
    query = _vector(indexed, "heart")
    inside, release = threading.Event(), threading.Event()
    real_load = MemoryVectors._load

    def slow_load(self: MemoryVectors, conn: sa.Connection, versions: list[uuid.UUID] | None) -> None:
        inside.set()
        assert release.wait(30)
        real_load(self, conn, versions)

    monkeypatch.setattr(MemoryVectors, "_load", slow_load)
    loader = threading.Thread(target=_memory, args=(indexed, memory, query, Filters(), 10))
    loader.start()
    try:
        assert inside.wait(30)
        started = time.perf_counter()
        assert _memory(indexed, memory, query, Filters(), 10) is None
        with indexed.engine.connect() as conn:
            assert memory.held(query, [1], catalog.log_positions(conn)) is None
        assert time.perf_counter() - started < 5  # answered, not held up by the load
    finally:
        release.set()
        loader.join(30)
    _assert_same(_exact(indexed, query, Filters(), 10), _memory(indexed, memory, query, Filters(), 10))


def test_a_search_whose_snapshot_is_older_than_the_arrays_is_left_to_the_index(
    indexed: Citeline, tmp_path: Path
) -> None:
    memory = MemoryVectors(indexed.embedder.model_id, BUDGET)
    query = _vector(indexed, "blood pressure")
    with indexed.engine.connect().execution_options(isolation_level="REPEATABLE READ") as old:
        view = read_catalog(old, indexed.embedder.model_id, Filters())  # the snapshot starts here
        indexed.ingest([write(tmp_path / "salt.txt", "Less salt lowers blood pressure.")])
        _assert_same(_exact(indexed, query, Filters(), 5), _memory(indexed, memory, query, Filters(), 5))
        assert memory.search(old, query, limit=5, log=view.log) is None
    # The arrays were not loaded back to the old snapshot.
    _assert_same(_exact(indexed, query, Filters(), 5), _memory(indexed, memory, query, Filters(), 5))


def test_a_scope_naming_versions_the_arrays_do_not_hold_is_left_to_the_index(indexed: Citeline) -> None:
    """An embedding-model migration searches its staged versions, not yet active: only the index has them."""
    memory = MemoryVectors(indexed.embedder.model_id, BUDGET)
    query = _vector(indexed, "heart")
    with indexed.engine.connect() as conn:
        scope = read_catalog(conn, indexed.embedder.model_id, Filters(scopes=("cardio",))).scope
        assert scope is not None and memory.search(conn, query, limit=5, scope=scope)
        staged = InScope([*scope.document_ids, uuid.uuid4()], scope.chunks + 1, scope.corpus_chunks)
        assert memory.search(conn, query, limit=5, scope=staged) is None
        assert memory.search(conn, query, limit=5, scope=InScope([], 0, scope.corpus_chunks)) == []


def test_a_namespace_made_again_with_a_shorter_log_is_loaded_anew(
    indexed: Citeline, settings: Settings, tmp_path: Path
) -> None:
    """Its log restarted: a position below the arrays' is not an older snapshot of the same catalog."""
    memory = MemoryVectors(indexed.embedder.model_id, BUDGET)
    query = _vector(indexed, "heart")
    _assert_same(_exact(indexed, query, Filters(), 10), _memory(indexed, memory, query, Filters(), 10))
    with namespace_again(settings) as again:
        again.ingest([write(tmp_path / "again" / "salt.txt", "Less salt lowers blood pressure.")])
        _assert_same(_exact(again, query, Filters(), 10), _memory(again, memory, query, Filters(), 10))
        assert memory.rows == 1


def test_a_namespace_made_again_whose_log_reaches_the_same_position_is_loaded_anew(
    indexed: Citeline, settings: Settings, tmp_path: Path
) -> None:
    """Another epoch's log at the arrays' very position is another catalog, not the one they hold."""
    memory = MemoryVectors(indexed.embedder.model_id, BUDGET)
    query = _vector(indexed, "heart")
    _assert_same(_exact(indexed, query, Filters(), 10), _memory(indexed, memory, query, Filters(), 10))
    with indexed.engine.connect() as conn:
        position = catalog.log_positions(conn).last
    with namespace_again(settings) as again:
        ingest_until_the_log_reaches(again, tmp_path / "again", position)
        _assert_same(_exact(again, query, Filters(), 10), _memory(again, memory, query, Filters(), 10))


def test_a_search_that_would_compare_too_many_vectors_is_left_to_the_index(
    indexed: Citeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a budget raised to hold a large corpus, the index answers searches that would compare most of
    it; a narrow filter, whose rows alone are compared, is still answered from the arrays."""
    dim = indexed.embedder.dimension
    monkeypatch.setattr(memory_vectors, "MOST_COMPARED", 2 * dim)
    memory = MemoryVectors(indexed.embedder.model_id, BUDGET)
    query = _vector(indexed, "fish")
    assert _memory(indexed, memory, query, Filters(), 5) is None  # six chunks: more than two
    universal = Filters(scopes=("nowhere",))  # one chunk of six: its row alone
    _assert_same(_exact(indexed, query, universal, 5), _memory(indexed, memory, query, universal, 5))
    explain = Explain()
    indexed.search(SearchRequest("fish"), explain=explain)
    assert explain.dense_plan == "hnsw"
    indexed.search(SearchRequest("fish", filters=universal), explain=explain)
    assert explain.dense_plan == "memory"
