"""Whether a difference between two rankings is real: bootstrap intervals, a paired test, cross-validation.

Every function here takes per-query scores (one number per query, the same queries in the same order
for every configuration) and nothing else, so any evaluation can use them: retrieval (nDCG@10 per
query), answers, a model migration. Randomness comes from a seeded generator, so the same scores
always give the same figures.

- :func:`bootstrap_ci`: a percentile bootstrap interval of the mean over queries.
- :func:`paired_comparison`: the mean difference of two configurations on the same queries, its paired
  bootstrap interval, and a two-sided paired randomisation (sign-flip) test of it.
- :func:`cross_validate`: K-fold cross-validation of choosing the best of several configurations.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from citeline.errors import InvalidRequestError

#: Resamples of the bootstrap and of the randomisation test: the p-value's resolution is 1/10,000, and
#: an interval's bounds move by about 0.001 nDCG between seeds on 300 queries.
RESAMPLES = 10_000
#: The seed of every random draw, so two runs over the same scores report the same figures.
SEED = 0
#: The confidence of every interval.
CONFIDENCE = 0.95

#: Differences smaller than this are float rounding, not differences (nDCG is a sum of divisions).
_TIE = 1e-12

Scores = Sequence[float] | npt.NDArray[np.float64]


def _vector(scores: Scores, what: str) -> npt.NDArray[np.float64]:
    values = np.asarray(scores, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise InvalidRequestError(f"{what} needs one score per query and at least one query")
    if not np.isfinite(values).all():
        raise InvalidRequestError(f"{what} needs finite scores; got NaN or infinity")
    return values


def _interval(means: npt.NDArray[np.float64], confidence: float) -> tuple[float, float]:
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(means, [tail, 100.0 - tail])
    return float(low), float(high)


def bootstrap_ci(
    scores: Scores, *, confidence: float = CONFIDENCE, resamples: int = RESAMPLES, seed: int = SEED
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``scores``, resampling queries with replacement.

    It says how far the mean could move on another sample of queries like these; it does not say
    whether one configuration beats another on the same queries (use :func:`paired_comparison`).
    """
    values = _vector(scores, "a bootstrap interval")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, values.size, size=(resamples, values.size))
    return _interval(values[picks].mean(axis=1), confidence)


@dataclass(frozen=True)
class PairedComparison:
    """Configuration B against configuration A on the same queries."""

    #: Mean over queries of B's score minus A's.
    delta: float
    #: Paired bootstrap interval of ``delta``: queries are resampled, each keeping both its scores.
    delta_ci: tuple[float, float]
    #: Two-sided p-value of the paired randomisation test: how often a mean difference at least as
    #: large as ``delta`` arises when each query's two scores are swapped at random.
    p_value: float
    #: Whether the p-value enumerated every swap (few queries) rather than drawing ``RESAMPLES`` of them.
    exact: bool


def paired_comparison(
    a: Scores,
    b: Scores,
    *,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> PairedComparison:
    """Compare ``b`` with ``a`` query by query: mean difference, its interval and a paired p-value.

    The test is the paired randomisation (sign-flip) test that IR evaluation recommends (Smucker, Allan
    and Carterette, 2007): under the null hypothesis that the two configurations are interchangeable,
    each query's difference is as likely to have either sign. With up to ``log2(resamples)`` queries
    every sign pattern is enumerated and the p-value is exact; otherwise ``resamples`` random patterns
    are drawn and the observed one is counted among them, so p is never 0. Identical scores give p = 1.
    """
    first, second = _vector(a, "a paired comparison"), _vector(b, "a paired comparison")
    if first.size != second.size:
        raise InvalidRequestError(
            "a paired comparison needs the same queries on both sides; "
            f"got {first.size} and {second.size} scores"
        )
    diffs = second - first
    n = diffs.size
    observed = abs(float(diffs.mean()))
    rng = np.random.default_rng(seed)

    picks = rng.integers(0, n, size=(resamples, n))
    delta_ci = _interval(diffs[picks].mean(axis=1), confidence)

    exact = 2**n <= resamples
    if exact:
        # Every sign pattern once: row i flips query j when bit j of i is set.
        bits = (np.arange(2**n)[:, None] >> np.arange(n)[None, :]) & 1
        flipped = np.abs(((1 - 2 * bits) * diffs).mean(axis=1))
        p_value = float(np.mean(flipped >= observed - _TIE))
    else:
        signs = rng.choice(np.array([-1.0, 1.0]), size=(resamples, n))
        flipped = np.abs((signs * diffs).mean(axis=1))
        p_value = float((1 + np.count_nonzero(flipped >= observed - _TIE)) / (resamples + 1))
    return PairedComparison(float(diffs.mean()), delta_ci, p_value, exact)


def fold_of_each_query(queries: int, folds: int, *, seed: int = SEED) -> npt.NDArray[np.int64]:
    """The fold (0..folds-1) of each query: a seeded shuffle dealt round-robin, so fold sizes differ by
    at most one and the same ``seed`` always deals the same folds."""
    check_folds(folds, queries)
    order = np.random.default_rng(seed).permutation(queries)
    assignment = np.empty(queries, dtype=np.int64)
    assignment[order] = np.arange(queries) % folds
    return assignment


def check_folds(folds: int, queries: int) -> None:
    """Refuse a fold count that cannot cross-validate ``queries`` queries."""
    if folds < 2:
        raise InvalidRequestError(f"--folds {folds}: cross-validation needs at least 2 folds")
    if folds > queries:
        raise InvalidRequestError(
            f"--folds {folds}: only {queries} queries to split; use at most {queries} folds"
        )


@dataclass(frozen=True)
class Fold:
    """One round of cross-validation: pick on the other folds, score on this one."""

    index: int
    #: Positions (in the score vectors) of the queries the configuration was picked on.
    picked_on: tuple[int, ...]
    #: Positions of this fold's queries, on which the picked configuration is scored.
    held_out: tuple[int, ...]
    picked: str
    #: The picked configuration's mean over the held-out queries.
    score: float


@dataclass(frozen=True)
class CrossValidation:
    """K-fold cross-validation of "take the configuration with the best mean"."""

    folds: tuple[Fold, ...]
    #: Mean over all queries of the held-out score each got from the configuration picked without it.
    held_out_mean: float
    #: How many folds picked each configuration, in the order the configurations were given.
    picks: dict[str, int]
    #: The configuration with the best mean over all queries, and that mean: what choosing on the
    #: whole sample would report, optimistic by construction.
    best_in_sample: str
    best_in_sample_mean: float
    seed: int


def cross_validate(scores: Mapping[str, Scores], folds: int, *, seed: int = SEED) -> CrossValidation:
    """For each fold, pick the configuration with the best mean on the other folds and score it here.

    ``scores`` maps each configuration's name to its per-query scores (same queries, same order). Ties
    go to the configuration given first, so a simpler setting listed first wins them. The held-out
    mean estimates what choosing among these configurations by their mean is worth on new queries
    of the same kind; the gap to :attr:`CrossValidation.best_in_sample_mean` is the optimism of
    choosing on the whole sample.
    """
    if not scores:
        raise InvalidRequestError("cross-validation needs at least one configuration")
    names = list(scores)
    matrix = np.stack([_vector(scores[name], f"cross-validation of {name!r}") for name in names])
    if len({row.size for row in matrix}) != 1:
        raise InvalidRequestError("cross-validation needs the same queries for every configuration")
    assignment = fold_of_each_query(matrix.shape[1], folds, seed=seed)
    held_out_scores = np.empty(matrix.shape[1], dtype=np.float64)
    rounds: list[Fold] = []
    for k in range(folds):
        test = np.flatnonzero(assignment == k)
        train = np.flatnonzero(assignment != k)
        # argmax returns the first of equal means: the earlier configuration wins a tie.
        best = int(np.argmax(_rounded(matrix[:, train].mean(axis=1))))
        held_out_scores[test] = matrix[best, test]
        rounds.append(
            Fold(
                k,
                tuple(map(int, train)),
                tuple(map(int, test)),
                names[best],
                float(matrix[best, test].mean()),
            )
        )
    means = _rounded(matrix.mean(axis=1))
    best_all = int(np.argmax(means))
    return CrossValidation(
        folds=tuple(rounds),
        held_out_mean=float(held_out_scores.mean()),
        picks={name: sum(f.picked == name for f in rounds) for name in names},
        best_in_sample=names[best_all],
        best_in_sample_mean=float(matrix[best_all].mean()),
        seed=seed,
    )


def _rounded(means: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    # Means equal but for float rounding count as a tie, so the order given decides, not summation order.
    return np.round(means, decimals=-int(math.log10(_TIE)))
