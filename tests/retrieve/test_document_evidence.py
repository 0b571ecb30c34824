"""Whole-document BM25 in search: its score reaches the candidate chunks of the best documents."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from citeline.engine import Citeline
from citeline.ingest import IngestOptions
from citeline.retrieve.filters import Filters
from citeline.retrieve.search import SearchRequest, document_evidence
from citeline.settings import Fusion
from citeline.store.keyword import DocumentMatch
from tests.conftest import write

TEXTS = {
    "pump.txt": "Prime the pump before first use. Open the bleed screw until water runs. "
    "In winter, drain the pump and flush the impeller with glycol. Store it in a heated shed.",
    "valve.txt": "The relief valve opens at 6 bar. Check the valve seat every season. "
    "A leaking valve wastes water and lowers the pump's pressure.",
    "hose.txt": "Coil the hose loosely. Sunlight cracks old hoses; store them in the shed over winter.",
}


def test_each_candidate_chunk_of_a_best_document_gets_its_score() -> None:
    a, b, c = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    documents = [DocumentMatch(a, 7.5, best_chunk=1), DocumentMatch(b, 2.0, best_chunk=4)]
    version_of = {1: a, 2: a, 4: b, 5: c}
    assert document_evidence(documents, version_of) == {1: 7.5, 2: 7.5, 4: 2.0}


@pytest.fixture
def garden(cl: Citeline, tmp_path: Path) -> Citeline:
    paths = [write(tmp_path / name, text) for name, text in TEXTS.items()]
    cl.ingest(paths, IngestOptions(chunk_size=80, chunk_overlap=20))
    return cl


@pytest.mark.parametrize("fusion", [Fusion.DISTRIBUTION, Fusion.WEIGHTED])
def test_documents_alone_rank_as_whole_document_bm25(garden: Citeline, fusion: Fusion) -> None:
    query = "drain the pump in winter and store it in the shed"
    where, params = Filters().sql()
    with garden.engine.connect() as conn:
        _, documents = garden.keyword_index.search_with_documents(
            conn, garden.analyzer.term_counts(query), where=where, params=params, document_ids=None, limit=10
        )
    assert len(documents) == len(TEXTS)
    only_documents = {"weight_semantic": 0.0, "weight_keyword": 0.0, "weight_source": 0.0}
    with garden.derive(fusion=fusion, weight_document=1.0, **only_documents) as searcher:
        hits = searcher.search(SearchRequest(query, top_k=30))
    first_seen = list(dict.fromkeys(h.document_name for h in hits))
    names = {d.version_id: d.name for d in garden.documents()}
    assert first_seen == [names[m.version_id] for m in documents]
    assert [h.fused_score for h in hits] == sorted((h.fused_score for h in hits), reverse=True)


def test_reciprocal_rank_fusion_leaves_documents_out(garden: Citeline) -> None:
    def ranked(weight: float) -> list[tuple[int, float]]:
        with garden.derive(fusion=Fusion.RECIPROCAL_RANK, weight_document=weight) as searcher:
            return [
                (h.chunk_id, h.fused_score) for h in searcher.search(SearchRequest("relief valve", top_k=10))
            ]

    assert ranked(0.0) == ranked(1.0)
