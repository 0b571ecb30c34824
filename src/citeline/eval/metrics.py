"""Ranking metrics over graded relevance judgements (qrels), as BEIR and trec_eval define them."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def ndcg_at(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """Normalised discounted cumulative gain at ``k`` with linear gains (``rel / log2(rank + 1)``).

    Only relevant documents (a score above 0) gain: a document judged with a negative score counts as
    not relevant, as one judged 0, so nDCG stays within 0..1."""
    dcg = sum(max(relevant.get(doc, 0), 0) / math.log2(i + 2) for i, doc in enumerate(ranked[:k]))
    ideal = sorted((g for g in relevant.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """Share of the relevant documents found in the first ``k``."""
    wanted = {doc for doc, g in relevant.items() if g > 0}
    if not wanted:
        return 0.0
    return len(wanted.intersection(ranked[:k])) / len(wanted)


def mrr_at(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """Reciprocal rank of the first relevant document within the first ``k`` (0 if none)."""
    for i, doc in enumerate(ranked[:k]):
        if relevant.get(doc, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) by linear interpolation between closest ranks."""
    if not values:
        return 0.0
    data = sorted(values)
    pos = (len(data) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)
