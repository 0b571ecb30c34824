"""Whether a difference between two rankings is real: bootstrap intervals, a paired test, cross-validation.

Every function here takes per-query scores (one number per query, the same queries in the same order
for every configuration) and nothing else, so any evaluation can use them: retrieval (nDCG@10 per
query), answers, a model migration. Randomness comes from a seeded generator, so the same scores
always give the same figures.

- :func:`bootstrap_ci`: a percentile bootstrap interval of the mean over queries.
- :func:`paired_comparison`: the mean difference of two configurations on the same queries, its paired
  bootstrap interval, and a two-sided paired randomisation (sign-flip) test of it.
- :func:`cross_validate`: K-fold cross-validation of choosing the best of several configurations.
- :func:`repeat_cross_validation`: the same over several shuffles of the queries, paired query by query
  against keeping the first configuration, so one lucky deal of the folds cannot decide.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

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
#: The p-value below which the paired test counts a difference as shown (1 - ``CONFIDENCE``).
ALPHA = 0.05
#: Shuffles of :func:`repeat_cross_validation`. On 450 SciFact claims (docs/evaluation.md), the deal
#: of seed 0 put choosing between the default and ``doc8`` 0.003 above keeping the default; over 50
#: deals choosing was above in 16 and 0.0002 below on average. 20 deals take milliseconds.
SHUFFLES = 20

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
    #: Queries whose two scores differ: the only ones either figure learns anything from.
    differing: int

    @property
    def verdict(self) -> Literal["higher", "lower", "not shown", "disagree"]:
        """ "higher" or "lower" when the interval excludes 0 and p is below :data:`ALPHA`; "not shown"
        when neither; "disagree" when only one does.

        The two can disagree when few queries differ: the percentile bootstrap of a mean over
        resampled queries is too narrow then (36 queries, 4 better by 0.2 and 1 worse by 0.05: the
        interval +0.003 to +0.043 excludes 0, the test gives p 0.12), so neither alone decides.
        """
        low, high = self.delta_ci
        excludes = low > _TIE or high < -_TIE
        shown = self.p_value < ALPHA
        if excludes and shown:
            return "higher" if self.delta > 0 else "lower"
        return "disagree" if excludes or shown else "not shown"

    @property
    def real(self) -> bool:
        """Whether the difference is shown: its interval and its test agree that it is not 0."""
        return self.verdict in ("higher", "lower")


def interval_text(interval: tuple[float, float]) -> str:
    """``low to high`` with signs and four decimals, so a reader can tell whether it holds 0: a bound
    that would round to ±0.0000 keeps its sign and two significant digits (``-0.0000012``), and only
    a bound that is 0 reads ``0``."""
    return " to ".join(_bound(value) for value in interval)


def _bound(value: float) -> str:
    if abs(value) <= _TIE:
        return "0"
    text = f"{value:+.4f}"
    if float(text) == 0.0:
        return str(np.format_float_positional(value, precision=2, fractional=False, sign=True, trim="-"))
    return text


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
    differing = int(np.count_nonzero(np.abs(diffs) > _TIE))
    return PairedComparison(float(diffs.mean()), delta_ci, p_value, exact, differing)


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
    if queries < 2:
        raise InvalidRequestError(
            f"--folds {folds}: cross-validation needs at least 2 queries (one a fold); only {queries} to run"
        )
    if folds > queries:
        raise InvalidRequestError(
            f"--folds {folds}: only {queries} queries to split; use at most {queries} folds"
        )


def check_shuffles(shuffles: int) -> None:
    """Refuse a number of deals that cannot repeat cross-validation."""
    if shuffles < 1:
        raise InvalidRequestError(
            f"--shuffles {shuffles}: cross-validation needs at least 1 deal of the queries"
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
    names, matrix = _matrix(scores, "cross-validation")
    held_out_scores, rounds = _held_out(names, matrix, folds, seed)
    means = _rounded(matrix.mean(axis=1))
    best_all = int(np.argmax(means))
    return CrossValidation(
        folds=rounds,
        held_out_mean=float(held_out_scores.mean()),
        picks={name: sum(f.picked == name for f in rounds) for name in names},
        best_in_sample=names[best_all],
        best_in_sample_mean=float(matrix[best_all].mean()),
        seed=seed,
    )


@dataclass(frozen=True)
class RepeatedCrossValidation:
    """:func:`cross_validate` over several shuffles of the queries, against keeping the first configuration.

    One deal of the queries into folds is itself a draw: on a few hundred queries, whether choosing
    beats keeping the first configuration can turn on which queries share a fold. Repeating the deal
    with seeds ``0 .. shuffles - 1`` (seed 0 is the deal :func:`cross_validate` reports) shows how
    often it does, and pairing each query's held-out score, averaged over the deals, with the first
    configuration's score says whether choosing is worth anything on queries like these.
    """

    shuffles: int
    folds: int
    #: The held-out mean of each deal, in seed order.
    held_out_means: tuple[float, ...]
    #: Folds that picked each configuration, over all deals (``shuffles * folds`` in all).
    picks: dict[str, int]
    #: The configuration listed first (the setting in use) and its mean over all queries.
    first: str
    first_mean: float
    #: Deals whose held-out mean is above ``first_mean``: where choosing beat keeping the first.
    above_first: int
    #: Each query's held-out score averaged over the deals, paired against the first configuration's.
    vs_first: PairedComparison

    @property
    def held_out_mean(self) -> float:
        """The mean of the deals' held-out means."""
        return float(np.mean(self.held_out_means))


def repeat_cross_validation(
    scores: Mapping[str, Scores], folds: int, *, shuffles: int = SHUFFLES
) -> RepeatedCrossValidation:
    """:func:`cross_validate` with seeds ``0 .. shuffles - 1``, summed up against keeping the first
    configuration (see :class:`RepeatedCrossValidation`)."""
    check_shuffles(shuffles)
    names, matrix = _matrix(scores, "cross-validation")
    # How many deals held each query out under each configuration: weighting the scores by these
    # shares keeps a query held out under the first configuration in every deal at exactly its score.
    counts = np.zeros(matrix.shape, dtype=np.int64)
    means: list[float] = []
    picks = dict.fromkeys(names, 0)
    for seed in range(shuffles):
        held_out_scores, rounds = _held_out(names, matrix, folds, seed)
        means.append(float(held_out_scores.mean()))
        for f in rounds:
            picks[f.picked] += 1
            counts[names.index(f.picked), list(f.held_out)] += 1
    per_query = (counts / shuffles * matrix).sum(axis=0)
    first_mean = float(matrix[0].mean())
    above = _rounded(np.array(means)) > _rounded(np.array([first_mean]))
    return RepeatedCrossValidation(
        shuffles=shuffles,
        folds=folds,
        held_out_means=tuple(means),
        picks=picks,
        first=names[0],
        first_mean=first_mean,
        above_first=int(np.count_nonzero(above)),
        vs_first=paired_comparison(matrix[0], per_query),
    )


def _matrix(scores: Mapping[str, Scores], what: str) -> tuple[list[str], npt.NDArray[np.float64]]:
    """The configurations' names and their scores as rows of one matrix (same queries, same order)."""
    if not scores:
        raise InvalidRequestError(f"{what} needs at least one configuration")
    names = list(scores)
    rows = [_vector(scores[name], f"{what} of {name!r}") for name in names]
    if len({row.size for row in rows}) != 1:
        raise InvalidRequestError(f"{what} needs the same queries for every configuration")
    return names, np.stack(rows)


def _held_out(
    names: list[str], matrix: npt.NDArray[np.float64], folds: int, seed: int
) -> tuple[npt.NDArray[np.float64], tuple[Fold, ...]]:
    """Each query's score from the configuration picked without its fold, and the folds' rounds."""
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
    return held_out_scores, tuple(rounds)


def _rounded(means: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    # Means equal but for float rounding count as a tie, so the order given decides, not summation order.
    return np.round(means, decimals=-int(math.log10(_TIE)))
