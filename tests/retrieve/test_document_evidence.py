"""Whole-document BM25 in search: its score reaches the candidate chunks of the best documents."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from citeline.engine import Citeline
from citeline.ingest import IngestOptions
from citeline.retrieve.filters import Filters
from citeline.retrieve.search import Explain, SearchRequest, document_evidence
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


def _fused(cl: Citeline, first: int, filters: Filters | None = None) -> tuple[Explain, set[tuple[str, int]]]:
    """How a search of :data:`QUERY` ran with ``document_chunks`` = ``first``, and (document, chunk index)
    of its hits, when each ranked list holds one chunk: whatever else is fused came in with a
    whole-document match."""
    explain = Explain()
    settings = {"weight_keyword": 0.0, "weight_document": 0.2, "document_chunks": first}
    with cl.derive(**settings) as searcher:
        request = SearchRequest(QUERY, filters=filters or Filters(), top_k=1, candidates=1)
        searcher.search(request, explain=explain)
        hits = searcher.search(replace(request, top_k=100))
    return explain, {(h.document_name, h.chunk_index) for h in hits}


def _active(cl: Citeline) -> set[tuple[str, int]]:
    """(document, chunk index) of every chunk of the active versions."""
    return {(d.name, c["chunk_index"]) for d in cl.documents() if d.is_active for c in cl.chunks(d)}


QUERY = "drain the pump and store the hose in the shed over winter"


#: A document of many chunks that matches the query best as a whole, while no chunk of it alone
#: matches more than a few of its terms.
MANUAL = (
    "Winter care. Drain the pump before the frost. Coil the hose and hang it up. Store the pump in the "
    "shed. Keep the shed dry over winter. Drain the hose as well. Store the hose off the floor of the shed. "
    "Check the pump again in spring. The shed should stay above freezing all winter long."
)


def test_the_best_document_brings_its_first_chunks_and_no_more(garden: Citeline, tmp_path: Path) -> None:
    garden.ingest([write(tmp_path / "manual.txt", MANUAL)], IngestOptions(chunk_size=80, chunk_overlap=20))
    where, params = Filters().sql()
    with garden.engine.connect() as conn:
        _, (best, *_) = garden.keyword_index.search_with_documents(
            conn, garden.analyzer.term_counts(QUERY), where=where, params=params, document_ids=None, limit=1
        )
    name = {d.version_id: d.name for d in garden.documents()}[best.version_id]
    length = sum(1 for n, _ in _active(garden) if n == name)
    assert length >= 5, f"the test needs a best document of many chunks, not {name} ({length})"
    base, _ = _fused(garden, 0)
    # One chunk from each list and the best document's best keyword chunk: at most 3.
    assert base.document_candidates == 1 and base.fused_candidates <= 3
    fused = [base.fused_candidates]
    for first in range(1, length + 2):
        explain, _ = _fused(garden, first)
        brought = min(first, length)
        assert max(base.fused_candidates, brought) <= explain.fused_candidates
        assert explain.fused_candidates <= base.fused_candidates + brought
        fused.append(explain.fused_candidates)
    assert fused == sorted(fused)
    # Past the document's length nothing more comes.
    assert fused[-1] == fused[-2]


def test_documents_outside_the_filter_bring_nothing(garden: Citeline, tmp_path: Path) -> None:
    shed = "The shed holds the pump, the hose and the glycol over winter. Drain the pump and store the hose."
    garden.ingest([write(tmp_path / "other" / "shed.txt", shed)], IngestOptions(scopes=("greenhouse",)))
    _, outside = _fused(garden, 8, Filters(scopes=("orchard",)))
    _, inside = _fused(garden, 8, Filters(scopes=("greenhouse",)))
    assert "shed.txt" not in {name for name, _ in outside}
    assert "shed.txt" in {name for name, _ in inside}


def test_after_a_new_version_and_a_delete_only_active_chunks_join(garden: Citeline, tmp_path: Path) -> None:
    hose = "Hoses: coil them. Drain the pump hose, and store the hose in the shed over winter."
    garden.ingest([write(tmp_path / "hose.txt", hose)], IngestOptions(chunk_size=80, chunk_overlap=20))
    current = {d.name: d for d in garden.documents() if d.is_active}["hose.txt"]
    assert current.version == 2
    _, found = _fused(garden, 8)
    assert found <= _active(garden)
    garden.delete(str(current.id))
    _, found = _fused(garden, 8)
    assert "hose.txt" not in {name for name, _ in found}
