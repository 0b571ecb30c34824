"""Fusion modes keep the orderings they promise, on hand-computed scores."""

from __future__ import annotations

import numpy as np
import pytest

from citeline.retrieve.fusion import (
    fuse_reciprocal_rank,
    fuse_weighted,
    min_max,
    reciprocal_rank,
    scaled_min_max,
    scaled_three_sigma,
    three_sigma,
    weighted,
)


def test_three_sigma_puts_the_mean_at_one_half_and_three_deviations_at_the_ends() -> None:
    # Mean 2, population standard deviation 1: the scale runs from -1 (0) to 5 (1).
    scaled = three_sigma({1: 1.0, 2: 3.0})

    assert scaled[1] == pytest.approx((1.0 - (2.0 - 3.0)) / 6.0)
    assert scaled[2] == pytest.approx((3.0 - (2.0 - 3.0)) / 6.0)
    assert three_sigma({7: 0.4, 8: 0.4}) == {7: 1.0, 8: 1.0}
    assert three_sigma({}) == {}


def test_one_far_ahead_candidate_does_not_flatten_the_others_to_nothing() -> None:
    # One keyword candidate far ahead, four close together.
    bm25 = {1: 30.0, 2: 5.0, 3: 4.9, 4: 4.8, 5: 4.7}

    mm, ts = min_max(bm25), three_sigma(bm25)

    # Min-max gives the four matches almost nothing for matching, the same as not being found (0).
    assert mm[1] == 1.0 and mm[2] < 0.02 and mm[5] == 0.0
    # Scaled by the spread, they keep most of a match's worth; order is kept, nothing is clipped.
    assert ts[1] > ts[2] > ts[3] > ts[4] > ts[5] > 0.3


def test_dbsf_counts_being_found_by_both_searches_for_more_than_min_max() -> None:
    # Chunk 9 is the keyword search's weakest find; chunk 8 was found by the dense search only. With
    # min-max, both score 0 for keywords; with three_sigma, 9 keeps credit for having been found.
    semantic = {8: 0.50, 9: 0.49, 10: 0.70, 11: 0.20}
    keyword = {10: 12.0, 11: 10.0, 9: 2.0}
    source = dict.fromkeys(semantic, 1.0)
    by_min_max = weighted(semantic, keyword, source, w_semantic=0.6, w_keyword=0.2, w_source=0.2)
    by_spread = weighted(
        semantic, keyword, source, w_semantic=0.6, w_keyword=0.2, w_source=0.2, normalise=three_sigma
    )

    assert by_min_max[8] > by_min_max[9]
    assert by_spread[9] > by_spread[8]
    assert max(by_spread, key=by_spread.__getitem__) == 10


def test_reciprocal_rank_rewards_agreement() -> None:
    fused = reciprocal_rank([[1, 2, 3], [3, 2, 4]], k=60)

    assert fused[2] == pytest.approx(2 / 62)
    assert fused[2] > fused[1] and fused[2] > fused[4]


def test_array_fusion_gives_the_scores_of_the_mapping_forms() -> None:
    dense, keyword = [3, 1, 2], [2, 4]
    ids = [1, 2, 3, 4]
    ranks = [
        np.array([dense.index(i) + 1 if i in dense else 0 for i in ids]),
        np.array([keyword.index(i) + 1 if i in keyword else 0 for i in ids]),
    ]
    by_rank = reciprocal_rank([dense, keyword], k=60)
    assert fuse_reciprocal_rank(ranks, k=60).tolist() == pytest.approx([by_rank[i] for i in ids])
    semantic = {1: 0.9, 2: 0.5, 3: 0.7, 4: 0.2}
    bm25 = {2: 7.0, 4: 1.0}
    source = {1: 1.0, 2: 0.5, 3: 0.5, 4: 0.0}
    for scale, normalise in ((scaled_min_max, min_max), (scaled_three_sigma, three_sigma)):
        arrays = fuse_weighted(
            np.array([semantic[i] for i in ids]),
            np.ones(4, dtype=bool),
            np.array([bm25.get(i, 0.0) for i in ids]),
            np.array([i in bm25 for i in ids]),
            np.array([source[i] for i in ids]),
            w_semantic=0.6,
            w_keyword=0.2,
            w_source=0.2,
            scale=scale,
        )
        mapping = weighted(
            semantic, bm25, source, w_semantic=0.6, w_keyword=0.2, w_source=0.2, normalise=normalise
        )
        assert arrays.tolist() == pytest.approx([mapping[i] for i in ids])


def _flat_dense_and_one_code(keyword_complete: bool) -> list[tuple[int, float]]:
    """100 dense candidates of near-equal similarity and one keyword-only candidate (id 100), the only
    chunk holding the query's one term, ranked by ``search._rank`` under dbsf."""
    import uuid

    from citeline.retrieve.search import _Candidates, _rank
    from citeline.settings import Fusion, Settings

    n = 101
    similarity = np.append(np.linspace(0.31, 0.21, 100), 0.2)
    candidates = _Candidates(
        ids=np.arange(n, dtype=np.int64),
        versions=[uuid.UUID(int=i) for i in range(n)],
        distance=1.0 - similarity,
        dense_rank=np.append(np.arange(1, 101), 0).astype(np.int64),
        keyword=np.append(np.zeros(100), 8.0),
        keyword_rank=np.append(np.zeros(100), 1).astype(np.int64),
        content_types=["text/markdown"] * n,
    )
    return _rank(candidates, Fusion.DISTRIBUTION, Settings(), None, (), keyword_complete=keyword_complete)


def test_a_keyword_list_holding_every_match_is_scaled_against_the_other_candidates_zeros() -> None:
    # The keyword list is shorter than the search's depth: every other candidate holds no query term
    # and its BM25 is 0. The lone match stands as far out of those zeros as it is (z = 10 among 101).
    ranked = dict(_flat_dense_and_one_code(keyword_complete=True))
    keyword_part = scaled_three_sigma(np.append(np.zeros(100), 8.0))
    similarity = np.append(np.linspace(0.31, 0.21, 100), 0.2)
    dense_part = scaled_three_sigma(similarity)

    assert ranked[100] == pytest.approx(0.6 * dense_part[100] + 0.2 * keyword_part[100] + 0.2)
    assert ranked[0] == pytest.approx(0.6 * dense_part[0] + 0.2 * keyword_part[0] + 0.2)
    assert keyword_part[100] > 2


def test_a_keyword_list_cut_at_the_depth_is_scaled_over_its_members_alone() -> None:
    # Cut at the depth, a candidate missing from the list may still hold a query term: its BM25 is not
    # known to be 0, so the list is scaled over its members (a lone member is 1, the others 0).
    complete = [i for i, _ in _flat_dense_and_one_code(keyword_complete=True)]
    cut = dict(_flat_dense_and_one_code(keyword_complete=False))
    dense_part = scaled_three_sigma(np.append(np.linspace(0.31, 0.21, 100), 0.2))

    assert cut[100] == pytest.approx(0.6 * dense_part[100] + 0.2 * 1.0 + 0.2)
    assert sorted(cut, key=lambda i: -cut[i]).index(100) > complete.index(100)
