"""Comparing configurations in one run: one stored corpus, each configuration ranking as it promises."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa
from rich.console import Console

from citeline.engine import Citeline
from citeline.errors import InvalidRequestError
from citeline.eval.beir import CHUNK_DEPTH, STAGES, Evaluation, KnownVectors, evaluate, load_beir
from citeline.eval.configs import make_config, parse_configs
from citeline.retrieve.filters import Filters
from citeline.retrieve.search import Hit, SearchRequest
from citeline.settings import Settings
from citeline.store.chroma import ChromaIndex
from citeline.store.database import schema_name
from citeline.store.keyword import SqlKeywordIndex
from tests.eval.conftest import QRELS, QUERIES

QUIET = Console(quiet=True)


def _ranking(evaluation: Evaluation, config: str, qid: str) -> list[str]:
    result = next(r for r in evaluation.results if r.config.name == config)
    return list(next(q for q in result.queries if q.query_id == qid).top10)


def test_dense_and_keyword_rank_as_their_retrievers_alone(cl: Citeline, beir_folder: Path) -> None:
    data = load_beir(beir_folder)
    evaluation = evaluate(cl, data, parse_configs("dense,keyword", cl.settings), console=QUIET)
    assert evaluation.corpus_added == 6
    # Two configurations, one stored corpus.
    assert len(cl.documents()) == 6

    with cl.engine.connect() as conn:
        chunks = conn.execute(
            sa.text("SELECT c.id, d.name, c.text FROM chunks c JOIN documents d ON d.id = c.document_id")
        ).all()
        assert len(chunks) == 6, "each entry is one chunk, so document order is chunk order"
        name_of = {cid: name for cid, name, _ in chunks}
        vectors = np.asarray(cl.embedder.embed([text for _, _, text in chunks]), dtype=np.float64)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        where, params = Filters().sql()

        for qid, query in QUERIES.items():
            q = np.asarray(cl.embedder.embed([query])[0], dtype=np.float64)
            cosine = vectors @ (q / np.linalg.norm(q))
            assert _ranking(evaluation, "dense", qid) == [chunks[i][1] for i in np.argsort(-cosine)]

            # BM25 alone, scored by PostgreSQL (the evaluation itself used the in-memory index).
            bm25 = SqlKeywordIndex().search(
                conn, cl.analyzer.term_counts(query), where=where, params=params, document_ids=None, limit=10
            )
            assert bm25, f"{qid} shares a word with some document"
            keyword = _ranking(evaluation, "keyword", qid)
            # Min-max scaling gives the weakest match 0, level with the documents BM25 did not find.
            assert keyword[: len(bm25) - 1] == [name_of[cid] for cid, _ in bm25[:-1]]
            assert name_of[bm25[-1][0]] in keyword

    # Where they disagree: the words of q3 point to the hotel lift, its meaning to the wing.
    assert _ranking(evaluation, "dense", "q3")[0] == QRELS["q3"] == "wings"
    assert _ranking(evaluation, "keyword", "q3")[0] == "elevator"
    dense_only, keyword_only = (r.metrics() for r in evaluation.results)
    assert dense_only["ndcg@10"] == 1.0 and keyword_only["ndcg@10"] < 1.0
    keyword_q3 = next(q for q in evaluation.results[1].queries if q.query_id == "q3")
    assert keyword_q3.first_relevant_rank is not None and keyword_q3.first_relevant_rank > 1
    assert keyword_q3.mrr10 == 1 / keyword_q3.first_relevant_rank


def test_each_search_records_its_stages(cl: Citeline, beir_folder: Path) -> None:
    evaluation = evaluate(
        cl,
        load_beir(beir_folder),
        parse_configs("weighted,rrf,plain=reranker:none", cl.settings),
        console=QUIET,
    )
    for result in evaluation.results:
        assert [q.query_id for q in result.queries] == list(QUERIES)
        for q in result.queries:
            assert set(q.stages_ms) == set(STAGES)
            assert all(q.stages_ms[s] > 0 for s in ("embed", "dense", "keyword", "fuse", "fetch"))
            # The stages are parts of the whole search; the query embeds while the catalog and keyword
            # stages run.
            stages = dict(q.stages_ms)
            overlapped = max(stages.pop("embed"), stages.pop("catalog") + stages.pop("keyword"))
            assert q.latency_ms >= overlapped + sum(stages.values())
        medians = result.metrics()["stage_p50_ms"]
        reranks = result.config.settings.reranker != "none"
        assert medians["embed"] > 0 and (medians["rerank"] > 0) == reranks


def test_summary_keeps_the_old_keys_for_the_first_configuration(cl: Citeline, beir_folder: Path) -> None:
    evaluation = evaluate(cl, load_beir(beir_folder), parse_configs("rrf,dense", cl.settings), console=QUIET)
    summary = evaluation.summary()
    assert list(summary)[:13] == [
        "dataset",
        "namespace",
        "fusion",
        "queries",
        "corpus_added",
        "corpus_unchanged",
        "ingest_seconds",
        "ndcg@10",
        "recall@10",
        "recall@100",
        "mrr@10",
        "latency_p50_ms",
        "latency_p99_ms",
    ]
    assert summary["config"] == "rrf" and summary["fusion"] == "rrf"
    assert list(summary["configs"]) == ["rrf", "dense"]
    for key in ("ndcg@10", "recall@100", "latency_p50_ms"):
        assert summary[key] == summary["configs"]["rrf"][key]
    assert summary["configs"]["dense"]["settings"]["weight_keyword"] == 0.0


def test_without_configs_the_current_settings_are_evaluated(cl: Citeline, beir_folder: Path) -> None:
    evaluation = evaluate(cl, load_beir(beir_folder), console=QUIET, limit=2)
    (result,) = evaluation.results
    assert result.config.name == "default" and result.config.settings == cl.settings
    assert evaluation.summary()["queries"] == 2


def test_a_configuration_for_another_store_is_refused(cl: Citeline, beir_folder: Path) -> None:
    other = make_config("elsewhere", {}, Settings(data_dir=cl.settings.data_dir, namespace="other_ns"))
    with pytest.raises(InvalidRequestError, match="'elsewhere' differs from the open store in namespace"):
        evaluate(cl, load_beir(beir_folder), [other], console=QUIET)
    assert cl.documents() == [], "refused before ingesting anything"


def test_the_top_ten_comes_from_the_search_users_get_and_recall_at_100_from_a_deep_one(
    cl: Citeline, beir_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    [few] = parse_configs("few=candidates:2", cl.settings)
    asked: list[int | None] = []
    search = Citeline.search

    def recording(self: Citeline, request: SearchRequest, **kwargs: Any) -> list[Hit]:
        asked.append(request.top_k)
        return search(self, request, **kwargs)

    # On the class: each configuration searches through its own (derived) instance.
    monkeypatch.setattr(Citeline, "search", recording)

    evaluation = evaluate(cl, load_beir(beir_folder), [few], console=QUIET)

    # One untimed warm-up search, then per query: a user's top-10 search (fusing max(2, 10) candidates
    # a side) and a 300-chunk one for recall@100.
    assert asked[1:] == [10, CHUNK_DEPTH] * len(QUERIES)
    with Citeline(few.settings) as user:
        for q in evaluation.results[0].queries:
            hits = user.search(SearchRequest(q.query, top_k=10))
            assert list(q.top10) == list(dict.fromkeys(h.document_name for h in hits))[:10]


def test_an_impossible_fold_count_is_refused_before_anything_is_ingested(
    cl: Citeline, beir_folder: Path
) -> None:
    configs = parse_configs("rrf,dense", cl.settings)
    with pytest.raises(InvalidRequestError, match="--folds 3: only 2 queries to split"):
        evaluate(cl, load_beir(beir_folder), configs, limit=2, folds=3, console=QUIET)
    assert cl.documents() == []


def test_without_folds_there_is_no_cross_validation(cl: Citeline, beir_folder: Path) -> None:
    evaluation = evaluate(cl, load_beir(beir_folder), parse_configs("rrf,dense", cl.settings), console=QUIET)
    assert evaluation.cross_validation is None and "cross_validation" not in evaluation.summary()
    assert list(evaluation.spreads) == ["rrf", "dense"] and evaluation.spreads["rrf"].vs_first is None


def test_vector_backends_are_compared_query_by_query_on_identical_vectors(
    cl: Citeline, beir_folder: Path
) -> None:
    """A configuration on Chroma searches the corpus in a namespace of its own, built from the vectors
    the pgvector store computed: same vectors, same rankings, a paired difference of exactly 0."""
    data = load_beir(beir_folder)
    configs = parse_configs("pgvector=vector_backend:pgvector,chroma=vector_backend:chroma", cl.settings)
    other = f"{cl.settings.namespace}_chroma"
    try:
        evaluation = evaluate(cl, data, configs, console=QUIET)
        assert evaluation.corpus_added == 12  # six entries in each store
        for qid in QUERIES:
            assert _ranking(evaluation, "chroma", qid) == _ranking(evaluation, "pgvector", qid)
        spread = evaluation.spreads["chroma"]
        assert spread.vs_first is not None and spread.vs_first.delta == 0.0
        # What the Chroma store was built from: the vectors of the open store, by text.
        assert len(KnownVectors.of(cl, cl.embedder).known) == 6
        with Citeline(
            cl.settings.model_copy(update={"namespace": other, "vector_backend": "chroma"})
        ) as chroma:
            assert {d.vector_index for d in chroma.documents()} == {"chroma"}
            with chroma.engine.connect() as conn:
                rows = conn.execute(sa.text("SELECT id, text FROM chunks")).all()
                texts: dict[int, str] = {int(r[0]): str(r[1]) for r in rows}
                vectors = chroma.vector_index.vectors(conn, list(texts))
            assert len(vectors) == 6
            for cid, text in texts.items():
                assert float(np.dot(vectors[cid], cl.embedder.embed([text])[0])) == pytest.approx(
                    1.0, abs=1e-5
                )
            index = chroma.vector_index
            assert isinstance(index, ChromaIndex)
            for collection in index.client.list_collections():
                if collection.name.startswith(f"citeline_{other}_"):
                    index.client.delete_collection(collection.name)
    finally:
        with cl.engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema_name(other)}" CASCADE'))
