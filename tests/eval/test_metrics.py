"""Ranking metrics against values worked out by hand."""

import math

import pytest

from citeline.eval.metrics import mrr_at, ndcg_at, percentile, recall_at

QRELS = {"a": 1, "c": 1}
RANKED = ["b", "a", "d", "c"]


def test_ndcg_by_hand() -> None:
    dcg = 1 / math.log2(3) + 1 / math.log2(5)
    idcg = 1 / math.log2(2) + 1 / math.log2(3)
    assert ndcg_at(RANKED, QRELS, 10) == pytest.approx(dcg / idcg)
    assert ndcg_at(RANKED, QRELS, 2) == pytest.approx((1 / math.log2(3)) / idcg)
    assert ndcg_at(["a", "c"], QRELS, 10) == pytest.approx(1.0)
    assert ndcg_at(["x"], QRELS, 10) == 0.0


def test_graded_relevance_uses_linear_gain() -> None:
    assert ndcg_at(["b", "a"], {"a": 1, "b": 2}, 10) == pytest.approx(1.0)
    expected = (1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3))
    assert ndcg_at(["a", "b"], {"a": 1, "b": 2}, 10) == pytest.approx(expected)


def test_a_document_judged_below_zero_counts_as_not_relevant() -> None:
    # TREC-style qrels mark harmful or spam documents with -1 or -2: ranking one first must cost what
    # ranking any irrelevant document costs, not push nDCG below 0.
    judged = {"a": 1, "spam": -2}
    assert ndcg_at(["spam", "a"], judged, 10) == pytest.approx(ndcg_at(["x", "a"], judged, 10))
    assert ndcg_at(["spam", "a"], judged, 10) == pytest.approx(1 / math.log2(3))
    assert ndcg_at(["spam"], judged, 10) == 0.0
    assert recall_at(["spam"], judged, 10) == 0.0 and mrr_at(["spam", "a"], judged, 10) == 0.5


def test_recall_and_mrr_by_hand() -> None:
    assert recall_at(RANKED, QRELS, 2) == 0.5
    assert recall_at(RANKED, QRELS, 4) == 1.0
    assert mrr_at(RANKED, QRELS, 10) == 0.5
    assert mrr_at(RANKED, QRELS, 1) == 0.0


def test_percentile_interpolates() -> None:
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([5.0], 99) == 5.0
    assert percentile(list(range(101)), 99) == 99


def test_the_first_relevant_rank_is_the_one_top10_and_mrr_read_and_past_them_the_deeper_searchs() -> None:
    from pathlib import Path

    from citeline.eval.beir import BeirData, _score

    data = BeirData(Path("."), "ns", Path("corpus.jsonl"), {"q": "query"}, {"q": {"rel": 1}})

    def first(ranked: list[str], deep: list[str]) -> int | None:
        return _score("c", "q", data, ranked, deep, 1.0, {}).first_relevant_rank

    # The deeper search, whose fusion sees more candidates, put it 4th where top10 shows it 5th: the
    # per-query line said rank 4 beside an mrr@10 of 0.2.
    shown = _score("c", "q", data, ["a", "b", "c", "d", "rel"], ["a", "b", "c", "rel", "d"], 1.0, {})
    assert shown.first_relevant_rank == 5 and shown.mrr10 == pytest.approx(0.2)
    # Found only by the deeper search: its rank, but never within the ranking that missed it.
    assert first(["a", "b"], ["rel", "a", "b"]) == 3
    assert first(["a", "b"], ["a", "b", "c", "rel"]) == 4
    assert first(["a"], ["b"]) is None
