"""The statistics of ``citeline eval``, on scores small enough to check by hand."""

from __future__ import annotations

import numpy as np
import pytest

from citeline.errors import InvalidRequestError
from citeline.eval.stats import (
    RESAMPLES,
    bootstrap_ci,
    cross_validate,
    fold_of_each_query,
    interval_text,
    paired_comparison,
    repeat_cross_validation,
)

#: 300 per-query nDCG-like scores, as many as SciFact's test claims.
SCORES = np.random.default_rng(7).uniform(0.0, 1.0, 300)


def test_the_bootstrap_interval_of_a_constant_is_that_constant() -> None:
    assert bootstrap_ci([0.625] * 50) == (0.625, 0.625)


def test_the_bootstrap_interval_holds_the_mean_and_narrows_with_more_queries() -> None:
    low, high = bootstrap_ci(SCORES)
    assert low < SCORES.mean() < high
    # The standard error of a mean of uniforms is 0.289 / sqrt(n): about +-0.033 at 95% for 300 queries.
    assert high - low == pytest.approx(2 * 1.96 * 0.2887 / np.sqrt(300), rel=0.15)
    wide_low, wide_high = bootstrap_ci(SCORES[:30])
    assert wide_high - wide_low > 2.5 * (high - low)


def test_the_same_scores_give_the_same_interval_every_run() -> None:
    assert bootstrap_ci(SCORES) == bootstrap_ci(list(SCORES))
    assert bootstrap_ci(SCORES, seed=1) != bootstrap_ci(SCORES)


def test_identical_runs_give_p_1_and_an_interval_around_0() -> None:
    same = paired_comparison(SCORES, SCORES.copy())
    assert same.delta == 0.0 and same.delta_ci == (0.0, 0.0) and same.p_value == 1.0


def test_runs_that_differ_only_in_some_queries_in_both_directions_are_not_told_apart() -> None:
    # One query better by 0.1, another worse by 0.1: the mean difference is 0.
    b = SCORES.copy()
    b[0] += 0.1
    b[1] -= 0.1
    result = paired_comparison(SCORES, b)
    assert result.delta == pytest.approx(0.0, abs=1e-15) and result.p_value == 1.0
    low, high = result.delta_ci
    assert low < 0.0 < high


def test_a_configuration_better_on_every_query_gets_a_tiny_p() -> None:
    better = SCORES + np.random.default_rng(8).uniform(0.001, 0.01, SCORES.size)
    result = paired_comparison(SCORES, better)
    assert not result.exact
    # No random sign pattern reaches a difference of one sign on 300 queries: p is 1 / (resamples + 1).
    assert result.p_value == 1 / (RESAMPLES + 1)
    assert 0.001 < result.delta_ci[0] < result.delta < result.delta_ci[1] < 0.01
    # The test is two-sided: worse on every query is just as significant.
    assert paired_comparison(better, SCORES).p_value == result.p_value


def test_with_few_queries_every_sign_pattern_is_counted() -> None:
    # Four queries, each better by 1, 2, 3 and 4: of the 16 sign patterns only "all +" and "all -"
    # reach a mean difference of 2.5 in size, so p = 2/16.
    result = paired_comparison([0.0] * 4, [1.0, 2.0, 3.0, 4.0])
    assert result.exact and result.delta == 2.5 and result.p_value == 2 / 16
    # Better by 1, 1, 1 and worse by 1: |mean| >= 0.5 in every pattern but the six with two of each
    # sign, so p = 10/16.
    assert paired_comparison([0.0] * 4, [1.0, 1.0, 1.0, -1.0]).p_value == 10 / 16


def test_a_paired_test_sees_a_small_steady_gain_that_the_two_intervals_overlap_on() -> None:
    # Why the paired test: a gain of 0.01 on every query is far inside each configuration's own
    # interval (queries differ far more from each other than the configurations do), yet certain.
    better = SCORES + 0.01
    low_a, high_a = bootstrap_ci(SCORES)
    low_b, _ = bootstrap_ci(better)
    assert low_a < low_b < high_a
    assert paired_comparison(SCORES, better).p_value < 0.001


def test_comparisons_need_the_same_queries_on_both_sides() -> None:
    with pytest.raises(InvalidRequestError, match="same queries on both sides; got 3 and 2"):
        paired_comparison([0.1, 0.2, 0.3], [0.1, 0.2])
    with pytest.raises(InvalidRequestError, match="at least one query"):
        bootstrap_ci([])
    with pytest.raises(InvalidRequestError, match="finite"):
        bootstrap_ci([0.5, float("nan")])


def test_folds_are_a_seeded_shuffle_of_near_equal_size() -> None:
    folds = fold_of_each_query(23, 5)
    assert sorted(np.bincount(folds)) == [4, 4, 5, 5, 5]
    assert (fold_of_each_query(23, 5) == folds).all()
    assert not (fold_of_each_query(23, 5, seed=1) == folds).all()
    assert list(folds) != [i % 5 for i in range(23)], "shuffled, not dealt in order"


def test_cross_validation_never_scores_a_configuration_on_the_fold_it_was_picked_on() -> None:
    k, n = 5, 40
    fold = fold_of_each_query(n, k)
    # "oracle_j" is perfect on fold j and scores 0 on every other query. Picked on the other folds it
    # looks worthless, so an honest cross-validation never picks oracle_j for fold j, and every held-out
    # score is 0; picking with the held-out fold in view would pick oracle_j there and score 1.
    scores = {f"oracle_{j}": np.where(fold == j, 1.0, 0.0) for j in range(k)}
    result = cross_validate(scores, k)

    assert result.held_out_mean == 0.0
    assert result.best_in_sample_mean == pytest.approx(8 / 40)
    for f in result.folds:
        assert f.picked != f"oracle_{f.index}" and f.score == 0.0
        assert set(f.held_out) == set(np.flatnonzero(fold == f.index))
        assert set(f.picked_on).isdisjoint(f.held_out)
        assert sorted(f.picked_on + f.held_out) == list(range(n))
    # Each query was held out exactly once.
    assert sorted(q for f in result.folds for q in f.held_out) == list(range(n))
    assert sum(result.picks.values()) == k


def test_cross_validation_picks_the_steady_winner_and_reports_picks_in_order() -> None:
    base = SCORES[:50]
    scores = {"plain": base, "better": base + 0.05, "worse": base - 0.05}
    result = cross_validate(scores, 5)
    assert result.picks == {"plain": 0, "better": 5, "worse": 0}
    assert result.held_out_mean == pytest.approx(float(base.mean()) + 0.05)
    assert result.best_in_sample == "better"
    assert [f.index for f in result.folds] == [0, 1, 2, 3, 4]


def test_a_tie_goes_to_the_configuration_given_first() -> None:
    base = SCORES[:20]
    result = cross_validate({"simple": base, "fancy": base.copy()}, 4)
    assert result.picks == {"simple": 4, "fancy": 0} and result.best_in_sample == "simple"


@pytest.mark.parametrize(("folds", "message"), [(1, "at least 2 folds"), (11, "only 10 queries")])
def test_impossible_fold_counts_are_refused(folds: int, message: str) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        cross_validate({"a": SCORES[:10]}, folds)


def test_repeated_cross_validation_is_cross_validation_over_seeds_0_to_n() -> None:
    base = SCORES[:60]
    scores = {"plain": base, "noisy": base + np.random.default_rng(3).normal(0.0, 0.1, 60)}
    result = repeat_cross_validation(scores, 5, shuffles=7)

    deals = [cross_validate(scores, 5, seed=seed) for seed in range(7)]
    assert result.held_out_means == pytest.approx([d.held_out_mean for d in deals])
    assert result.picks == {name: sum(d.picks[name] for d in deals) for name in scores}
    assert sum(result.picks.values()) == 7 * 5
    assert result.first == "plain" and result.first_mean == pytest.approx(float(base.mean()))
    assert result.above_first == sum(d.held_out_mean > base.mean() for d in deals)
    # Query by query: the score each query got held out, averaged over the deals, against "plain".
    held_out = np.zeros(60)
    for d in deals:
        for f in d.folds:
            held_out[list(f.held_out)] += scores[f.picked][list(f.held_out)]
    expected = paired_comparison(base, held_out / 7)
    assert result.vs_first.delta == pytest.approx(expected.delta)
    assert result.vs_first.delta_ci == pytest.approx(expected.delta_ci)


def test_one_deal_of_the_folds_can_flatter_a_change_that_other_deals_do_not() -> None:
    # "noisy" is 0.01 better on average, under per-query differences ten times that: which deal of the
    # queries into folds is used decides whether choosing between the two looks like a gain.
    base = SCORES[:60]
    noise = np.random.default_rng(3).normal(0.0, 0.1, 60)
    scores = {"plain": base, "noisy": base + noise - noise.mean() + 0.01}
    deals = [cross_validate(scores, 5, seed=seed).held_out_mean for seed in range(20)]
    assert any(d > base.mean() for d in deals) and any(d < base.mean() for d in deals)

    result = repeat_cross_validation(scores, 5, shuffles=20)
    assert 0 < result.above_first < 20
    low, high = result.vs_first.delta_ci
    assert low < 0 < high


def test_repeating_a_tie_or_a_steady_winner() -> None:
    base = SCORES[:50]
    tie = repeat_cross_validation({"simple": base, "fancy": base.copy()}, 5)
    assert tie.shuffles == 20 and tie.picks == {"simple": 100, "fancy": 0}
    assert tie.above_first == 0 and tie.vs_first.delta == 0.0 and tie.vs_first.p_value == 1.0

    better = repeat_cross_validation({"plain": base, "better": base + 0.05}, 5, shuffles=10)
    assert better.above_first == 10 and better.picks == {"plain": 0, "better": 50}
    assert better.held_out_mean == pytest.approx(float(base.mean()) + 0.05)
    assert better.vs_first.delta_ci[0] > 0 and better.vs_first.p_value < 0.001


def test_repeating_needs_at_least_one_deal() -> None:
    with pytest.raises(InvalidRequestError, match="at least 1 deal"):
        repeat_cross_validation({"a": SCORES[:10]}, 2, shuffles=0)


def test_a_difference_is_real_only_when_its_interval_and_its_test_agree() -> None:
    # 36 questions, 4 better by 0.2 and 1 worse by 0.05: the percentile interval of the mean difference
    # excludes 0 (+0.003 to +0.043), but the sign-flip test, which sees only five queries that differ,
    # gives p 0.12. Neither is called real; the disagreement is named, with how many queries differ.
    base = [0.5] * 36
    result = paired_comparison(base, [0.5] * 31 + [0.7] * 4 + [0.45])
    assert 0.0 < result.delta_ci[0] < result.delta_ci[1] and result.p_value == pytest.approx(0.12, abs=0.01)
    assert result.verdict == "disagree" and not result.real and result.differing == 5
    # Better on every query: both agree that it is higher; worse on every query: lower.
    better = SCORES + np.random.default_rng(8).uniform(0.001, 0.01, SCORES.size)
    assert paired_comparison(SCORES, better).verdict == "higher" and paired_comparison(SCORES, better).real
    assert paired_comparison(better, SCORES).verdict == "lower"
    # Identical runs: neither shows a difference. An interval ending exactly on 0 holds 0.
    assert paired_comparison(SCORES, SCORES.copy()).verdict == "not shown"
    on_zero = paired_comparison(base, [0.5] * 31 + [0.7] * 4 + [0.4])
    assert on_zero.delta_ci[0] == 0.0 and on_zero.verdict == "not shown" and not on_zero.real


@pytest.mark.parametrize(
    ("low", "high", "text"),
    [
        (-0.0118, -0.0000012, "-0.0118 to -0.0000012"),
        (-0.0118, 0.0003, "-0.0118 to +0.0003"),
        (-0.0118, 0.0, "-0.0118 to 0"),
        (0.00123, 0.0456, "+0.0012 to +0.0456"),
        (0.0, 0.0, "0 to 0"),
    ],
)
def test_an_interval_is_printed_so_a_reader_can_tell_whether_it_holds_0(
    low: float, high: float, text: str
) -> None:
    # "-0.012 to +0.000" could be either; a bound that rounds to 0 keeps its sign and enough digits.
    assert interval_text((low, high)) == text
