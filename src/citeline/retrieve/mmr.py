"""Maximal marginal relevance (Carbonell and Goldstein, 1998): a relevant ranking that repeats itself less.

Passages are picked one at a time; each pick maximises
``lambda * relevance - (1 - lambda) * (highest cosine similarity to a passage already picked)``.
Relevance is the ranking's own score, min-max scaled to [0, 1] over the pool so that it and the
similarity are on comparable scales whatever produced it (fused scores, a reranker's logits).
``lambda = 1`` keeps the ranking as it is; lower values push near-duplicates down.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from citeline.errors import InvalidRequestError


def mmr(relevance: Sequence[float], vectors: NDArray[np.float32], *, k: int, lambda_: float) -> list[int]:
    """Indices of the ``k`` items chosen by MMR, in the order chosen.

    ``relevance`` holds one score per row of ``vectors`` (unit-length rows, so dot products are
    cosines); higher is more relevant. The first pick is always the most relevant item. Ties go to the
    earlier item, so ``lambda_ = 1`` returns the items by descending relevance, stable. Raises
    :class:`InvalidRequestError` when ``lambda_`` is outside [0, 1].
    """
    if not 0.0 <= lambda_ <= 1.0:
        raise InvalidRequestError(
            f"mmr_lambda must be in [0, 1] (1 keeps the ranking as it is), got {lambda_}"
        )
    if len(relevance) != len(vectors):
        raise ValueError(f"{len(relevance)} relevance scores for {len(vectors)} vectors")
    n = len(relevance)
    k = min(k, n)
    if k <= 0:
        return []
    rel = np.asarray(relevance, dtype=np.float64)
    span = rel.max() - rel.min()
    rel = (rel - rel.min()) / span if span > 0 else np.ones(n)
    similarity = np.asarray(vectors, dtype=np.float64) @ np.asarray(vectors, dtype=np.float64).T
    # Highest similarity of each item to anything picked so far.
    redundancy = np.full(n, -np.inf)
    available = np.ones(n, dtype=bool)
    picked: list[int] = []
    for step in range(k):
        # The first pick has nothing to be redundant with: it is the most relevant, whatever lambda.
        gain = rel if step == 0 else lambda_ * rel - (1 - lambda_) * redundancy
        gain = np.where(available, gain, -np.inf)
        choice = int(np.argmax(gain))  # argmax returns the first of equal maxima: ties keep the order
        picked.append(choice)
        available[choice] = False
        redundancy = np.maximum(redundancy, similarity[choice])
    return picked
