"""Fusing the dense and keyword rankings into one.

Both modes take the two candidate lists and return a fused score per chunk; higher is better. The
search fuses arrays aligned on its candidates (:func:`fuse_weighted`, :func:`scaled_min_max`,
:func:`scaled_three_sigma`); the mapping forms give the same scores for callers holding dicts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
from numpy.typing import NDArray

#: A normalisation of one list's scores (a float64 array) to the scale fusion adds up.
Scale = Callable[[NDArray[np.float64]], NDArray[np.float64]]


def reciprocal_rank(
    rankings: Sequence[Sequence[int]], *, k: int = 60, weights: Sequence[float] | None = None
) -> dict[int, float]:
    """Reciprocal rank fusion (Cormack et al., 2009): ``sum(w / (k + rank))`` with 1-based ranks."""
    weights = weights or [1.0] * len(rankings)
    scores: dict[int, float] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
    return scores


def fuse_reciprocal_rank(ranks: Sequence[NDArray[np.int64]], *, k: int = 60) -> NDArray[np.float64]:
    """:func:`reciprocal_rank` over arrays aligned on the candidates: each holds a candidate's 1-based
    rank in one list, 0 where that list lacks it."""
    fused = np.zeros(ranks[0].size if ranks else 0, dtype=np.float64)
    for rank in ranks:
        fused += np.where(rank > 0, 1.0 / (k + rank), 0.0)
    return fused


def scaled_min_max(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """``values`` scaled to [0, 1]; all-equal values become 1."""
    if values.size == 0:
        return values
    lo, hi = values.min(), values.max()
    if hi == lo:
        return np.ones_like(values)
    out: NDArray[np.float64] = (values - lo) / (hi - lo)
    return out


def scaled_three_sigma(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """``values`` scaled so that their mean minus three standard deviations is 0 and plus three is 1.

    Distribution-based score fusion (Qdrant's DBSF) normalises each list this way. Unlike min-max, a
    list's single best or worst candidate does not set its scale, and a candidate missing from a list
    (scored 0) sits three deviations below that list's mean instead of level with its worst member.
    Values are not clipped: clipped at 1, SciFact's nDCG@10 fell from 0.745 to 0.728, as the clearly
    best candidates lost their lead. All-equal values become 1.
    """
    if values.size == 0:
        return values
    mean, deviation = values.mean(), values.std()
    if deviation == 0:
        return np.ones_like(values)
    out: NDArray[np.float64] = (values - (mean - 3 * deviation)) / (6 * deviation)
    return out


def fuse_weighted(
    semantic: NDArray[np.float64],
    in_semantic: NDArray[np.bool_],
    keyword: NDArray[np.float64],
    in_keyword: NDArray[np.bool_],
    source: NDArray[np.float64],
    *,
    w_semantic: float,
    w_keyword: float,
    w_source: float,
    scale: Scale = scaled_min_max,
    document: NDArray[np.float64] | None = None,
    in_document: NDArray[np.bool_] | None = None,
    w_document: float = 0.0,
) -> NDArray[np.float64]:
    """Weighted score fusion as in the medical search, over arrays aligned on the candidates: each
    list is scaled over its own members (``in_semantic``, ``in_keyword``), a candidate missing from a
    list scores 0 for it, and a per-source boost in [0, 1] is added. ``document``, when given, is a
    third list (whole-document BM25 reaching the chunks), scaled over ``in_document``."""
    fused = w_source * source
    lists = [(semantic, in_semantic, w_semantic), (keyword, in_keyword, w_keyword)]
    if document is not None and in_document is not None and w_document:
        lists.append((document, in_document, w_document))
    for values, members, weight in lists:
        part = np.zeros_like(fused)
        part[members] = scale(values[members])
        fused += weight * part
    return fused


def _on_mapping(scale: Scale, scores: Mapping[int, float]) -> dict[int, float]:
    keys = list(scores)
    values = scale(np.fromiter(scores.values(), dtype=np.float64, count=len(keys)))
    return dict(zip(keys, values.tolist(), strict=True))


def min_max(scores: Mapping[int, float]) -> dict[int, float]:
    """:func:`scaled_min_max` of a mapping's values."""
    return _on_mapping(scaled_min_max, scores)


def three_sigma(scores: Mapping[int, float]) -> dict[int, float]:
    """:func:`scaled_three_sigma` of a mapping's values."""
    return _on_mapping(scaled_three_sigma, scores)


def weighted(
    semantic: Mapping[int, float],
    keyword: Mapping[int, float],
    source: Mapping[int, float],
    *,
    w_semantic: float,
    w_keyword: float,
    w_source: float,
    normalise: Callable[[Mapping[int, float]], dict[int, float]] = min_max,
    document: Mapping[int, float] | None = None,
    w_document: float = 0.0,
) -> dict[int, float]:
    """Weighted score fusion as in the medical search: normalised similarity and BM25 (min-max by
    default, or :func:`three_sigma`), plus a per-source boost in [0, 1]. ``document``, when given, is a
    third list (whole-document BM25 on chunks), normalised on its own. A candidate missing from one
    list scores 0 for it."""
    document = document or {}
    sem, kw, doc = normalise(semantic), normalise(keyword), normalise(document)
    keys = set(semantic) | set(keyword) | set(document)
    return {
        key: w_semantic * sem.get(key, 0.0)
        + w_keyword * kw.get(key, 0.0)
        + w_document * doc.get(key, 0.0)
        + w_source * source.get(key, 0.0)
        for key in keys
    }
