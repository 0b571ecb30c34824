"""The search path: scoped dense plans find exactly what a brute-force scan finds, query vectors are
cached per model and text, and concurrent searches return what a lone search returns."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from numpy.typing import NDArray

from citeline.engine import Citeline
from citeline.errors import InvalidRequestError
from citeline.ingest import IngestOptions
from citeline.retrieve.filters import Filters
from citeline.retrieve.query import Coalescer, QueryVectors, VectorCache
from citeline.retrieve.search import Explain, SearchRequest, read_catalog
from citeline.settings import Fusion
from citeline.store import catalog
from citeline.store.catalog import ChunkGroup, ChunkRow, Labels, VersionSpec
from citeline.store.vectors import dense_search, ensure_index, plan_dense
from tests.conftest import write

DOCS, PER_DOC, DIM = 60, 50, 384
#: Filters keeping about 1.7%, 10% and 50% of the synthetic corpus, and a scope with a universal document.
SELECTIVITIES = {
    "one-document": Filters(tags_any=("one",)),
    "tenth": Filters(tags_any=("tenth",)),
    "half": Filters(tags_any=("half",)),
    "scope-with-universal": Filters(scopes=("s1",)),
}


def _labels(d: int) -> Labels:
    tags = [tag for tag, keep in (("one", d == 1), ("tenth", d % 10 == 1), ("half", d % 2 == 1)) if keep]
    # Document 0 is universal: in every scope.
    return Labels(tags=tuple(tags), scopes=() if d == 0 else (f"s{d % 3}",))


@pytest.fixture
def synthetic(cl: Citeline) -> tuple[Citeline, dict[int, NDArray[np.float32]]]:
    """3,000 chunks whose vectors lie around 40 random centres (so nearest neighbours are well defined,
    as with real embeddings), labelled by :func:`_labels`; returns each chunk's vector by id."""
    rng = np.random.default_rng(11)
    centres = rng.normal(size=(40, DIM))
    model = cl.embedder.model_id
    for d in range(DOCS):
        vectors = centres[rng.integers(0, 40, PER_DOC)] + rng.normal(scale=0.6, size=(PER_DOC, DIM))
        vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
        rows = [ChunkRow(i, f"doc {d} chunk {i}", 1, 0, 10, None, {"chunk": 1}, 1) for i in range(PER_DOC)]
        with cl.engine.begin() as conn:
            doc, _ = catalog.begin_version(
                conn,
                source_uri=f"synthetic://{d}",
                name=f"doc-{d}",
                spec=VersionSpec(uuid.uuid4().hex, model, 800, 120),
                labels=_labels(d),
            )
            catalog.insert_chunks(conn, model, [ChunkGroup(doc, rows, vectors)])
            catalog.activate(conn, [catalog.Activation(doc, f"doc {d}", "text/plain", None, 1, 0)])
    with cl.engine.begin() as conn:
        ensure_index(conn, model, DIM)
        conn.execute(sa.text("ANALYZE"))
        stored = conn.execute(sa.text("SELECT id, embedding FROM chunks")).all()
    return cl, {int(cid): vec.to_numpy() for cid, vec in stored}


def _brute_force(
    cl: Citeline,
    vectors: dict[int, NDArray[np.float32]],
    query: NDArray[np.float32],
    filters: Filters,
    k: int,
) -> list[int]:
    where, params = filters.sql()
    with cl.engine.connect() as conn:
        in_filter = conn.execute(
            sa.text(f"SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id WHERE {where}"),
            params,
        ).scalars()
        ids = np.array(sorted(in_filter))
    distances = 1 - np.stack([vectors[int(i)] for i in ids]) @ query
    return [int(ids[i]) for i in np.argsort(distances, kind="stable")[:k]]


#: ``(exact_search_below, hnsw_post_filter_max)``: always the index with the filter, the index unfiltered
#: where the filter is wide enough, the defaults (chosen by the filter's size), always exact.
PLAN_SETTINGS = {
    "index": (0, 0),
    "post-filter": (0, 1_000),
    "default": (2_000, 1_000),
    "exact": (1_000_000, 0),
}


def test_scoped_dense_search_finds_the_brute_force_top_k(
    synthetic: tuple[Citeline, dict[int, NDArray[np.float32]]],
) -> None:
    cl, vectors = synthetic
    rng = np.random.default_rng(5)
    queries = []
    for _ in range(5):
        query = next(iter(vectors.values())) + rng.normal(scale=0.05, size=DIM).astype(np.float32)
        queries.append(query / np.linalg.norm(query))
    plans: dict[str, set[str]] = {setting: set() for setting in PLAN_SETTINGS}
    for name, filters in SELECTIVITIES.items():
        where, params = filters.sql()
        for setting, (exact_below, post_filter_max) in PLAN_SETTINGS.items():
            for query in queries:
                with cl.engine.begin() as conn:
                    view = read_catalog(conn, cl.embedder.model_id, filters)
                    assert view.scope is not None
                    scope = (view.scope.document_ids, view.scope.chunks, view.scope.corpus_chunks)
                    plan = plan_dense(
                        scope,
                        limit=10,
                        ef_search=100,
                        exact_below=exact_below,
                        post_filter_max=post_filter_max,
                    )
                    plans[setting].add(plan.kind)
                    found = dense_search(
                        conn,
                        query,
                        model=cl.embedder.model_id,
                        where=where,
                        params=params,
                        scope=scope,
                        limit=10,
                        ef_search=100,
                        exact_below=exact_below,
                        post_filter_max=post_filter_max,
                    )
                expected = _brute_force(cl, vectors, query, filters, 10)
                assert [cid for cid, _ in found] == expected, (name, setting)
    # Each setting exercises the plan it is meant to; the one document (50 chunks of 3,000) is too narrow
    # to filter after: 2 * 10 * 3,000 / 50 = 1,200 chunks to fetch, over the 1,000 allowed.
    assert plans["index"] == {"hnsw-iterative"} and plans["exact"] == {"exact"}
    assert plans["post-filter"] == {"hnsw-post-filter", "hnsw-iterative"}


def test_a_post_filtered_search_that_fetched_too_few_in_the_filter_walks_the_index_with_it(
    synthetic: tuple[Citeline, dict[int, NDArray[np.float32]]],
) -> None:
    cl, vectors = synthetic
    one = SELECTIVITIES["one-document"]
    where, params = one.sql()
    with cl.engine.connect() as conn:
        own = conn.execute(
            sa.text(f"SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id WHERE {where}"),
            params,
        ).scalars()
        # Away from every chunk of the filter's one document: none is among the query's nearest.
        query = -np.mean([vectors[int(cid)] for cid in own], axis=0)
    query = (query / np.linalg.norm(query)).astype(np.float32)
    statements: list[str] = []
    ran: list[str] = []
    with cl.engine.begin() as conn:
        sa.event.listen(conn, "before_cursor_execute", lambda *args: statements.append(args[2]))
        view = read_catalog(conn, cl.embedder.model_id, one)
        assert view.scope is not None
        scope = (view.scope.document_ids, view.scope.chunks, view.scope.corpus_chunks)
        # 2 * 3 * 3,000 / 50 = 360 chunks fetched.
        assert plan_dense(scope, limit=3, ef_search=100, exact_below=0, post_filter_max=1_000).fetch == 360
        found = dense_search(
            conn,
            query,
            model=cl.embedder.model_id,
            where=where,
            params=params,
            scope=scope,
            limit=3,
            ef_search=100,
            exact_below=0,
            post_filter_max=1_000,
            ran=ran,
        )
    assert [cid for cid, _ in found] == _brute_force(cl, vectors, query, one, 3)
    assert ran == ["hnsw-post-filter", "hnsw-iterative"]  # what --explain reports
    searches = [s for s in statements if "nearest" in s]
    assert len(searches) == 2
    assert "uuid_send(document_id)" in searches[0] and "AS bytea" in searches[1]


def test_explain_reports_the_plan_and_the_filter_share(
    synthetic: tuple[Citeline, dict[int, NDArray[np.float32]]],
) -> None:
    cl, _ = synthetic
    half = SearchRequest("chunk", filters=SELECTIVITIES["half"])
    explain = Explain()
    cl.search(half, explain=explain)
    assert explain.selectivity == pytest.approx(0.5)
    assert (explain.scope_chunks, explain.corpus_chunks) == (1_500, 3_000)
    # 3,000 vectors fit the default memory_vectors_mb: compared in the process, filtered or not.
    assert explain.dense_plan == "memory" and explain.dense_candidates == 100
    unfiltered = Explain()
    cl.search(SearchRequest("chunk"), explain=unfiltered)
    assert unfiltered.dense_plan == "memory" and unfiltered.selectivity is None
    # It counts no chunks: unknown, not a corpus of 0.
    assert (unfiltered.scope_chunks, unfiltered.corpus_chunks) == (None, None)
    # The catalog and the kept hits' fields: the keyword index and the vectors are loaded by now, read no
    # log position of their own, and the vectors describe the candidates (versions, distances).
    assert unfiltered.round_trips == 2
    with cl.derive(memory_vectors_mb=0) as in_postgres:
        exact = Explain()
        in_postgres.search(half, explain=exact)
        # 1,500 * 1,500 <= 18 * 100 * 3,000: at this corpus size, scanning half of it is the cheaper plan.
        assert exact.dense_plan == "exact" and exact.dense_candidates == 100
        unfiltered = Explain()
        in_postgres.search(SearchRequest("chunk"), explain=unfiltered)
        assert unfiltered.dense_plan == "hnsw" and unfiltered.round_trips == 4
    with cl.derive(memory_vectors_mb=0, exact_search_below=0, hnsw_tuple_cost=0) as index_only:
        forced = Explain()
        index_only.search(half, explain=forced)
    # Half of the chunks in the filter: 2 * 100 * 3,000 / 1,500 = 400 fetched unfiltered find 100 in it.
    assert forced.dense_plan == "hnsw-post-filter" and forced.dense_candidates == 100
    with cl.derive(
        memory_vectors_mb=0, exact_search_below=0, hnsw_tuple_cost=0, hnsw_post_filter_max=0
    ) as walk_only:
        walked = Explain()
        walk_only.search(half, explain=walked)
    assert walked.dense_plan == "hnsw-iterative" and walked.dense_candidates == 100


def test_the_cache_never_returns_a_vector_for_another_model_or_text() -> None:
    cache = VectorCache(size=4)
    vector = np.arange(3, dtype=np.float32)
    cache.put("onnx:a", "insulin dose", vector)
    assert np.array_equal(cache.get("onnx:a", "insulin dose"), vector)  # type: ignore[arg-type]
    for model, text in [("onnx:b", "insulin dose"), ("onnx:a", "insulin dose "), ("onnx:a", "Insulin dose")]:
        assert cache.get(model, text) is None
    # Model and text are one key, never joined into a string that two pairs could share.
    cache.put("onnx:a:x", "y", vector + 1)
    assert cache.get("onnx:a", "x:y") is None


def test_cached_vectors_are_read_only_and_the_least_recently_used_goes_first() -> None:
    cache = VectorCache(size=2)
    stored = cache.put("m", "a", np.zeros(2, dtype=np.float32))
    with pytest.raises(ValueError, match="read-only"):
        stored[0] = 1.0
    cache.put("m", "b", np.ones(2, dtype=np.float32))
    assert cache.get("m", "a") is not None  # "a" is now the most recently used
    cache.put("m", "c", np.ones(2, dtype=np.float32))
    assert cache.get("m", "b") is None and cache.get("m", "a") is not None and len(cache) == 2


def test_the_cache_keeps_each_threads_vector_under_its_own_key() -> None:
    cache = VectorCache(size=64)
    wrong: list[tuple[int, int]] = []

    def work(worker: int) -> None:
        for i in range(500):
            key = worker * 1000 + i % 80
            cache.put(f"m{worker}", str(key), np.full(4, key, dtype=np.float32))
            got = cache.get(f"m{worker}", str(key))
            if got is not None and int(got[0]) != key:
                wrong.append((key, int(got[0])))

    threads = [threading.Thread(target=work, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong and len(cache) == 64


def test_query_vectors_match_the_ingest_embedding_and_are_cached_per_text(cl: Citeline) -> None:
    vectors = QueryVectors(threads=2, cache_size=8)
    texts = ["insulin dose adjustment", "hand hygiene before surgery"]
    for text in texts:
        assert vectors.cached(cl.embedder, text) is None
        fresh = vectors.embed(cl.embedder, text)
        np.testing.assert_allclose(fresh, cl.embedder.embed([text])[0], atol=1e-5)
    first, second = (vectors.cached(cl.embedder, t) for t in texts)
    assert first is not None and second is not None and not np.allclose(first, second)


def test_a_repeated_search_reuses_its_vector_and_finds_the_same(cl: Citeline, tmp_path: Path) -> None:
    cl.ingest([write(tmp_path / "a.txt", "Titrate basal insulin by two units every three days.")])
    first, again = Explain(), Explain()
    hits = cl.search("basal insulin titration", explain=first)
    assert cl.search("basal insulin titration", explain=again) == hits
    assert (first.cache_hit, again.cache_hit) == (False, True)


def test_a_compound_the_question_splits_still_matches_the_documents_word(
    cl: Citeline, tmp_path: Path
) -> None:
    # "back up" is two words to the analyzer ("up" a stop word), "backup" one; the question's words
    # written together are looked for too, so the page that says "backup" scores on the keyword side.
    cl.ingest(
        [
            write(tmp_path / "backup.txt", "Run citeline backup nightly; the backup holds the namespace."),
            write(tmp_path / "back.txt", "Lower back pain after lifting: rest, then return to work."),
        ]
    )

    hits = {Path(h.document_name).name: h for h in cl.search("How do I back up the namespace?")}

    assert hits["backup.txt"].keyword_score > hits["back.txt"].keyword_score > 0


def test_concurrent_searches_return_what_a_lone_search_returns(cl: Citeline, tmp_path: Path) -> None:
    topics = ["insulin dosing", "hand hygiene", "blood pressure", "asthma inhalers", "fever in children"]
    for n, topic in enumerate(topics):
        paths = [
            write(tmp_path / f"{n}-{i}.txt", f"Notes {i} on {topic}: guidance and doses.") for i in range(6)
        ]
        cl.ingest(paths, IngestOptions(scopes=(f"unit-{n % 2}",)))
    requests = [
        SearchRequest(f"{topic} guidance", filters=filters, top_k=5)
        for topic in topics
        for filters in (Filters(), Filters(scopes=("unit-1",)), Filters(tags_any=("none",)))
    ]
    with cl.derive(query_cache_size=0) as uncached:
        alone = [[(h.chunk_id, h.fused_score) for h in uncached.search(r)] for r in requests]
        with ThreadPoolExecutor(max_workers=6) as pool:
            together = list(
                pool.map(lambda r: [(h.chunk_id, h.fused_score) for h in uncached.search(r)], requests * 3)
            )
    # The same hits in the same order. Queries embedded together in one model run (retrieve.query.
    # Coalescer) get vectors equal to float rounding (3e-8), so the scores are compared to 1e-6.
    assert [[c for c, _ in hits] for hits in together] == [[c for c, _ in hits] for hits in alone * 3]
    for hits, lone in zip(together, alone * 3, strict=True):
        assert [score for _, score in hits] == pytest.approx([score for _, score in lone], abs=1e-6)
    assert any(alone) and all(len(hits) == 5 for hits in alone[:2])


class _HeldRuns:
    """An embed function for Coalescer that records each run's texts and holds the first run until
    released, so queries arrive while a run is in flight."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.runs: list[list[str]] = []
        self.started = threading.Event()
        self.release = threading.Event()
        self.fail_on = fail_on

    def __call__(self, texts: list[str]) -> NDArray[np.float32]:
        self.runs.append(list(texts))
        if len(self.runs) == 1:
            self.started.set()
            assert self.release.wait(10)
        if self.fail_on in texts and len(texts) > 1:
            raise RuntimeError(f"the service refused {self.fail_on!r}")
        return np.array([[float(len(t)), float(t.count("a"))] for t in texts], dtype=np.float32)


def _arrive_during_first_run(coalescer: Coalescer, held: _HeldRuns, texts: list[str]) -> list[object]:
    """Embed ``texts[0]`` (its run held), then the rest from other threads while it is in flight."""
    results: dict[int, object] = {}

    def call(i: int) -> None:
        try:
            results[i] = coalescer.embed(texts[i])
        except Exception as exc:
            results[i] = exc

    first = threading.Thread(target=call, args=(0,))
    first.start()
    assert held.started.wait(10)
    others = [threading.Thread(target=call, args=(i,)) for i in range(1, len(texts))]
    for t in others:
        t.start()
    while len(held.runs) == 1 and (coalescer._waiting is None or len(coalescer._waiting.texts) < len(others)):
        threading.Event().wait(0.01)
    held.release.set()
    for t in [first, *others]:
        t.join(10)
    return [results[i] for i in range(len(texts))]


def test_a_lone_query_runs_at_once_and_alone() -> None:
    held = _HeldRuns()
    held.release.set()
    coalescer = Coalescer(held)
    assert list(coalescer.embed("banana")) == [6.0, 3.0]
    assert list(coalescer.embed("kiwi")) == [4.0, 0.0]
    assert held.runs == [["banana"], ["kiwi"]]


def test_queries_arriving_during_a_run_share_the_next_run_and_each_gets_its_own_row() -> None:
    held = _HeldRuns()
    coalescer = Coalescer(held)
    texts = ["first", "banana", "kiwi", "papaya"]
    results = _arrive_during_first_run(coalescer, held, texts)
    assert held.runs[0] == ["first"] and sorted(held.runs[1]) == ["banana", "kiwi", "papaya"]
    assert len(held.runs) == 2
    for text, vector in zip(texts, results, strict=True):
        assert list(vector) == [float(len(text)), float(text.count("a"))]  # type: ignore[call-overload]
    # Idle again: the next query runs alone at once.
    coalescer.embed("again")
    assert held.runs[-1] == ["again"]


def test_a_failed_shared_run_costs_no_caller_whose_own_text_embeds() -> None:
    held = _HeldRuns(fail_on="poison")
    coalescer = Coalescer(held)
    results = _arrive_during_first_run(coalescer, held, ["first", "banana", "poison", "kiwi"])
    assert list(results[1]) == [6.0, 3.0] and list(results[3]) == [4.0, 0.0]  # type: ignore[call-overload]
    assert not isinstance(results[2], Exception)  # alone, "poison" embeds: only the shared run failed
    assert sorted(held.runs[1]) == ["banana", "kiwi", "poison"]
    assert sorted(map(tuple, held.runs[2:])) == [("banana",), ("kiwi",), ("poison",)]


def test_with_room_for_two_runs_a_second_query_does_not_wait_for_the_first() -> None:
    held = _HeldRuns()
    coalescer = Coalescer(held, runs=2)
    first = threading.Thread(target=coalescer.embed, args=("first",))
    first.start()
    assert held.started.wait(10)
    assert list(coalescer.embed("kiwi")) == [4.0, 0.0]  # ran beside the held run
    held.release.set()
    first.join(10)
    assert held.runs == [["first"], ["kiwi"]]


@pytest.mark.parametrize("mmr_lambda", [None, 0.7])
@pytest.mark.parametrize("top_k", [0, -1])
def test_a_search_for_fewer_than_one_hit_is_refused_not_given_the_default(
    cl: Citeline, tmp_path: Path, top_k: int, mmr_lambda: float | None
) -> None:
    cl.ingest([write(tmp_path / "valves.md", "# Valves\n\nThe relief valve opens at 6 bar.")])
    # With MMR, the second stage asks the first for its candidates: a 0 must not hide behind that.
    searcher = cl.derive(mmr_lambda=mmr_lambda)
    try:
        with pytest.raises(InvalidRequestError, match=f"top_k \\(-k\\) must be at least 1, got {top_k}"):
            searcher.search(SearchRequest("relief valve", top_k=top_k))
        assert len(searcher.search(SearchRequest("relief valve"))) == 1
    finally:
        searcher.close()


@pytest.mark.parametrize("candidates", [0, -3])
def test_a_search_with_fewer_than_one_candidate_is_refused_not_given_the_default(
    cl: Citeline, tmp_path: Path, candidates: int
) -> None:
    cl.ingest([write(tmp_path / "valves.md", "# Valves\n\nThe relief valve opens at 6 bar.")])
    with pytest.raises(InvalidRequestError, match=f"candidates must be at least 1, got {candidates}"):
        cl.search(SearchRequest("relief valve", candidates=candidates))
    assert len(cl.search(SearchRequest("relief valve", candidates=1))) == 1


def test_a_fusion_given_by_name_runs_that_fusion_and_an_unknown_one_is_refused(
    cl: Citeline, tmp_path: Path
) -> None:
    cl.ingest([write(tmp_path / "valves.md", "# Valves\n\nThe relief valve opens at 6 bar.")])
    by_enum = cl.search(SearchRequest("relief valve", fusion=Fusion.RECIPROCAL_RANK))
    # A caller from Python or JSON may give the name: it must not silently run another mode.
    by_name = cl.search(SearchRequest("relief valve", fusion="rrf"))  # type: ignore[arg-type]
    assert [h.fused_score for h in by_name] == [h.fused_score for h in by_enum]
    assert (
        by_enum[0].fused_score
        != cl.search(SearchRequest("relief valve", fusion=Fusion.WEIGHTED))[0].fused_score
    )
    with pytest.raises(InvalidRequestError, match="unknown fusion 'bogus'; known: rrf, weighted, dbsf"):
        cl.search(SearchRequest("relief valve", fusion="bogus"))  # type: ignore[arg-type]
