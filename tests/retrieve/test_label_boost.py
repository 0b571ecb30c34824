"""CITELINE_LABEL_BOOST: documents carrying a trusted label (a tag, a category or a scope) rank higher in
weighted and dbsf fusion, by CITELINE_WEIGHT_SOURCE times the largest boost among their labels. Two
documents of the same text tie on every other score, so the boost alone decides their order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from citeline.cli import app
from citeline.engine import Citeline
from citeline.ingest import IngestOptions
from citeline.retrieve.search import Explain, Hit, SearchRequest
from citeline.settings import Fusion
from tests.conftest import write

QUERY = "maximum daily dose of paracetamol in adults"
TEXT = "The maximum daily dose of paracetamol in adults is 4 g, taken as 1 g every six hours at most."


@pytest.fixture
def twins(cl: Citeline, tmp_path: Path) -> Citeline:
    """``formulary.txt`` (tag ``trusted``, category ``Clinical/Pharmacy``) and ``forum.txt`` (scope
    ``ward-7``, category ``Community``), word for word the same passage."""
    cl.ingest(
        [write(tmp_path / "formulary.txt", TEXT)],
        IngestOptions(tags=("trusted",), category="Clinical/Pharmacy"),
    )
    cl.ingest([write(tmp_path / "forum.txt", TEXT)], IngestOptions(scopes=("ward-7",), category="Community"))
    return cl


def _search(
    cl: Citeline, boost: dict[str, float], *, fusion: Fusion = Fusion.DISTRIBUTION, memory: bool = True
) -> list[Hit]:
    # Copies stay hits of their own, so both documents' scores show.
    settings = {"label_boost": boost, "collapse_duplicates": False, "fusion": fusion}
    with cl.derive(**settings, **({} if memory else {"memory_vectors_mb": 0})) as searcher:
        return searcher.search(SearchRequest(QUERY, top_k=2))


def _order(hits: list[Hit]) -> list[str]:
    return [h.document_name for h in hits]


@pytest.mark.parametrize("memory", [True, False], ids=["vectors-in-process", "vectors-in-postgres"])
@pytest.mark.parametrize("fusion", [Fusion.DISTRIBUTION, Fusion.WEIGHTED])
@pytest.mark.parametrize(
    ("boost", "first", "boosts"),
    [
        ({"tag:trusted": 1.0}, "formulary.txt", (1.0, 0.0)),
        ({"scope:ward-7": 1.0}, "forum.txt", (1.0, 0.0)),
        # A category boosts the categories below it, as a category filter keeps them.
        ({"category:Clinical": 0.5}, "formulary.txt", (0.5, 0.0)),
        ({"category:Community": 0.5}, "forum.txt", (0.5, 0.0)),
        # The largest boost among a document's labels, never their sum.
        (
            {"tag:trusted": 0.5, "category:Clinical/Pharmacy": 0.25, "scope:ward-7": 0.75},
            "forum.txt",
            (0.75, 0.5),
        ),
    ],
)
def test_the_boosted_twin_ranks_first_by_weight_source_times_its_boost(
    twins: Citeline,
    boost: dict[str, float],
    first: str,
    boosts: tuple[float, float],
    fusion: Fusion,
    memory: bool,
) -> None:
    hits = _search(twins, boost, fusion=fusion, memory=memory)
    assert _order(hits)[0] == first
    assert (hits[0].label_boost, hits[1].label_boost) == boosts
    lift = twins.settings.weight_source * (boosts[0] - boosts[1])
    assert hits[0].fused_score - hits[1].fused_score == pytest.approx(lift)


def test_without_a_boost_the_twins_tie_and_an_empty_map_changes_nothing(twins: Citeline) -> None:
    plain = _search(twins, {})
    assert plain[0].fused_score == plain[1].fused_score
    assert [h.label_boost for h in plain] == [0.0, 0.0]
    # A map whose labels no document carries adds nothing either: same hits, same scores.
    unmatched = _search(twins, {"tag:nobody-has-this": 1.0, "category:Clinic": 1.0, "scope:ward-70": 1.0})
    assert [(h.chunk_id, h.fused_score) for h in unmatched] == [(h.chunk_id, h.fused_score) for h in plain]
    with twins.derive(collapse_duplicates=False) as searcher:
        default = searcher.search(SearchRequest(QUERY, top_k=2))
    assert [(h.chunk_id, h.fused_score) for h in default] == [(h.chunk_id, h.fused_score) for h in plain]


def test_reciprocal_rank_fusion_has_no_weights_and_ignores_the_boost(twins: Citeline) -> None:
    plain = _search(twins, {}, fusion=Fusion.RECIPROCAL_RANK)
    boosted = _search(twins, {"scope:ward-7": 1.0}, fusion=Fusion.RECIPROCAL_RANK)
    assert [(h.chunk_id, h.fused_score, h.label_boost) for h in boosted] == [
        (h.chunk_id, h.fused_score, h.label_boost) for h in plain
    ]


@pytest.mark.parametrize("memory", [True, False], ids=["vectors-in-process", "vectors-in-postgres"])
def test_a_relabel_moves_the_boost_at_once(twins: Citeline, memory: bool) -> None:
    trusted = {"tag:trusted": 1.0}
    settings = {"label_boost": trusted, "collapse_duplicates": False}
    with twins.derive(**settings, **({} if memory else {"memory_vectors_mb": 0})) as searcher:

        def order() -> list[str]:
            return _order(searcher.search(SearchRequest(QUERY, top_k=2)))

        assert order() == ["formulary.txt", "forum.txt"] == order()
        ids = {d.name: d.id for d in twins.documents()}
        # Relabelling writes no keyword log: vectors held in the process must not keep the old labels.
        twins.relabel(ids["formulary.txt"], IngestOptions(tags=()))
        twins.relabel(ids["forum.txt"], IngestOptions(tags=("trusted",)))
        assert order() == ["forum.txt", "formulary.txt"] == order()


def test_explain_says_how_many_candidates_the_boost_lifted(twins: Citeline) -> None:
    def explained(boost: dict[str, float], fusion: Fusion = Fusion.DISTRIBUTION) -> Explain:
        explain = Explain()
        with twins.derive(label_boost=boost, fusion=fusion) as searcher:
            searcher.search(SearchRequest(QUERY, top_k=2), explain=explain)
        return explain

    assert explained({"tag:trusted": 1.0}).label_boosted == 1
    assert explained({"category:Clinical": 1.0, "scope:ward-7": 1.0}).label_boosted == 2
    assert explained({}).label_boosted is None
    assert explained({"tag:trusted": 1.0}, Fusion.RECIPROCAL_RANK).label_boosted is None


@pytest.mark.parametrize("memory", [True, False], ids=["vectors-in-process", "vectors-in-postgres"])
def test_the_labels_come_at_no_extra_round_trip(twins: Citeline, memory: bool) -> None:
    def round_trips(boost: dict[str, float]) -> int:
        explain = Explain()
        with twins.derive(label_boost=boost, **({} if memory else {"memory_vectors_mb": 0})) as searcher:
            searcher.search(SearchRequest(QUERY, top_k=2))  # loads what the process holds
            searcher.search(SearchRequest(QUERY, top_k=2), explain=explain)
        return explain.round_trips

    assert round_trips({"tag:trusted": 1.0}) == round_trips({})


def test_search_explain_says_the_label_boosts_part(twins: Citeline) -> None:
    env = {"CITELINE_LABEL_BOOST": '{"tag:trusted": 1}', "CITELINE_COLLAPSE_DUPLICATES": "false"}
    where = ["--data-dir", str(twins.settings.data_dir), "--namespace", twins.settings.namespace]
    result = CliRunner().invoke(app, [*where, "search", QUERY, "--explain"], env=env)
    assert result.exit_code == 0, result.stderr
    assert "label boost lifted 1 of 2 candidates" in result.stdout
    formulary, forum = (line for line in result.stdout.splitlines() if ".txt p.1" in line)
    assert "formulary.txt" in formulary and "label boost 1" in formulary
    assert "label boost" not in forum

    result = CliRunner().invoke(app, [*where, "search", QUERY, "--json"], env=env)
    assert [(h["document_name"], h["label_boost"]) for h in json.loads(result.stdout)] == [
        ("formulary.txt", 1.0),
        ("forum.txt", 0.0),
    ]
