"""Earlier-cited chunks join a follow-up's evidence: bounded, deduplicated, re-scored, active and in scope."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import pytest

from citeline.chat.history import merge, remembered_hits
from citeline.engine import Citeline
from citeline.ingest import IngestOptions
from citeline.retrieve.filters import Filters
from citeline.retrieve.search import Hit, SearchRequest
from tests.conftest import write

DOCS = {
    "pump.md": "# Pumps\n\nPrime the centrifugal pump with water before first use; a dry impeller wears.\n",
    "frost.md": "# Frost\n\nDrain the volute before winter so frost cannot crack the pump casing.\n",
    "seals.md": "# Seals\n\nReplace the mechanical seal when water drips from the shaft of the pump.\n",
    "bearings.md": "# Bearings\n\nGrease the motor bearings every six months of pump service.\n",
    "tomato.md": "# Tomatoes\n\nWater tomato seedlings in the morning and feed them weekly.\n",
    "bread.md": "# Bread\n\nKnead the dough for ten minutes until it is smooth and elastic.\n",
}
QUERY = "how often should the pump be serviced?"


@pytest.fixture
def chunk_of(cl: Citeline, tmp_path: Path) -> dict[str, int]:
    """The one chunk id of each document, by file name."""
    for name, text in DOCS.items():
        write(tmp_path / name, text)
    cl.ingest([tmp_path])
    return {d.name: int(cl.chunks(d)[0]["id"]) for d in cl.documents()}


def remember(
    cl: Citeline,
    cited: list[int],
    *,
    limit: int,
    filters: Filters | None = None,
    exclude: Collection[int] = (),
    max_distance: float | None = None,
) -> list[Hit]:
    vector = cl.embedder.embed([QUERY])[0]
    with cl.engine.connect() as conn:
        return remembered_hits(
            conn,
            cited,
            vector,
            model=cl.embedder.model_id,
            filters=filters or Filters(),
            limit=limit,
            vector_index=cl.vector_index,
            exclude=exclude,
            max_distance=max_distance,
        )


def test_the_most_recently_cited_come_first_bounded_and_without_the_fresh_ones(
    cl: Citeline, chunk_of: dict[str, int]
) -> None:
    recent_first = [chunk_of[n] for n in ("bread.md", "seals.md", "frost.md", "pump.md", "tomato.md")]
    hits = remember(cl, [*recent_first, chunk_of["seals.md"]], limit=3, exclude={chunk_of["seals.md"]})
    assert [h.document_name for h in hits] == ["bread.md", "frost.md", "pump.md"]


def test_remembered_chunks_are_scored_against_the_new_query(cl: Citeline, chunk_of: dict[str, int]) -> None:
    hits = remember(cl, [chunk_of["bread.md"], chunk_of["bearings.md"]], limit=4)
    expected = {h.chunk_id: h.distance for h in cl.fetch([h.chunk_id for h in hits], query=QUERY)}
    assert {h.chunk_id: h.distance for h in hits} == pytest.approx(expected)
    bread, bearings = hits
    assert bearings.similarity > bread.similarity


def test_a_retired_chunk_is_skipped_and_an_older_citation_takes_its_place(
    cl: Citeline, chunk_of: dict[str, int], tmp_path: Path
) -> None:
    write(tmp_path / "frost.md", "# Frost\n\nEmpty the volute and the pipes before the first frost.\n")
    cl.ingest([tmp_path / "frost.md"])
    recent_first = [chunk_of[n] for n in ("frost.md", "seals.md", "pump.md", "tomato.md")]
    hits = remember(cl, recent_first, limit=3)
    assert [h.document_name for h in hits] == ["seals.md", "pump.md", "tomato.md"]


def test_a_conversation_never_widens_the_requests_scopes(cl: Citeline, tmp_path: Path) -> None:
    write(tmp_path / "a" / "ward_a.md", "# Ward A\n\nPump service on ward A is on Mondays.\n")
    write(tmp_path / "b" / "ward_b.md", "# Ward B\n\nPump service on ward B is on Fridays.\n")
    write(tmp_path / "all" / "shared.md", "# Shared\n\nEvery pump is serviced twice a year.\n")
    cl.ingest([tmp_path / "a"], IngestOptions(scopes=("ward-a",)))
    cl.ingest([tmp_path / "b"], IngestOptions(scopes=("ward-b",)))
    cl.ingest([tmp_path / "all"])
    ids = [int(cl.chunks(d)[0]["id"]) for d in sorted(cl.documents(), key=lambda d: d.name)]
    hits = remember(cl, ids, limit=4, filters=Filters(scopes=("ward-b",)))
    assert sorted(h.document_name for h in hits) == ["shared.md", "ward_b.md"]


def test_chunks_too_far_from_the_new_query_are_dropped(cl: Citeline, chunk_of: dict[str, int]) -> None:
    both = [chunk_of["bread.md"], chunk_of["bearings.md"]]
    far, near = remember(cl, both, limit=4)
    cut = (far.distance + near.distance) / 2
    assert [h.chunk_id for h in remember(cl, both, limit=4, max_distance=cut)] == [near.chunk_id]


def test_no_slots_means_no_lookup(cl: Citeline, chunk_of: dict[str, int]) -> None:
    assert remember(cl, list(chunk_of.values()), limit=0) == []


def test_merged_evidence_keeps_the_fresh_ranking_and_slots_history_in_by_similarity(
    cl: Citeline, chunk_of: dict[str, int]
) -> None:
    doc_id = {d.name: d.id for d in cl.documents()}
    in_search = Filters(document_ids=tuple(doc_id[n] for n in ("bearings.md", "frost.md", "tomato.md")))
    fresh = cl.search(SearchRequest(QUERY, filters=in_search))
    fresh_ids = [h.chunk_id for h in fresh]
    cited = [chunk_of[n] for n in ("bread.md", "bearings.md", "pump.md", "seals.md")]
    remembered = remember(cl, cited, limit=4)
    only_remembered = {h.chunk_id for h in remembered} - set(fresh_ids)
    assert only_remembered == {chunk_of[n] for n in ("bread.md", "pump.md", "seals.md")}
    merged = merge(fresh, [*remembered, *remembered])
    ids = [h.chunk_id for h in merged]
    assert len(ids) == len(set(ids))
    assert set(ids) == set(fresh_ids) | only_remembered
    assert [i for i in ids if i in fresh_ids] == fresh_ids
    for position, hit in enumerate(merged):
        if hit.chunk_id in only_remembered:
            # A remembered hit sits just before the first fresh hit it is more similar to the query than.
            earlier = [h for h in merged[:position] if h.chunk_id in fresh_ids]
            later = [h for h in merged[position + 1 :] if h.chunk_id in fresh_ids]
            assert all(h.similarity >= hit.similarity for h in earlier)
            assert not later or later[0].similarity < hit.similarity
    # The pump passage is closer to the question than some fresh hits, so it is not simply appended.
    assert ids.index(chunk_of["pump.md"]) < ids.index(fresh_ids[-1])
