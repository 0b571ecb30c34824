"""The quantities a claim states and whether a passage states them otherwise: hand-checkable cases."""

from __future__ import annotations

import pytest

from citeline.answer.quantities import consistent, disagreement, identifiers, quantities

DEVICE_TABLE = """# Device table

| Model | Max pressure (bar) | Flow (L/min) | Power (W) |
| --- | --- | --- | --- |
| HX-2000 | 10 | 40 | 550 |
| HX-4000 | 16 | 60 | 750 |
| HX-6000 | 25 | 90 | 1100 |"""

PARACETAMOL = (
    "The usual dose for adults is 500 mg to 1 g every 4 to 6 hours. The maximum daily dose is 4 g; in "
    "patients weighing less than 50 kg, do not exceed 60 mg/kg per day."
)

CSV_ROW = "model: HX-4000; max_pressure_bar: 16; flow_l_min: 60; power_w: 750; seal: mechanical"


def read(text: str) -> list[tuple[str, float, float, str, str]]:
    return [(q.text, q.low, q.high, q.unit.symbol, q.bound) for q in quantities(text)]


def test_a_number_with_a_unit_is_a_quantity_and_a_maximum_named_in_its_clause_bounds_it() -> None:
    assert read("The max pressure of the HX-4000 is 10 bar.") == [("10 bar", 10, 10, "bar", "upper")]
    assert read("Give at least 5 mg, up to 2.5 g daily, for 5 days.") == [
        ("at least 5 mg", 5, 5, "mg", "lower"),
        ("up to 2.5 g daily", 2.5, 2.5, "g/day", "upper"),
        ("5 days", 5, 5, "days", "value"),
    ]
    assert read("Mortality fell by 30% within 2 to 4 weeks, over between 1 and 3 years.") == [
        ("30%", 30, 30, "%", "value"),
        ("2 to 4 weeks", 2, 4, "weeks", "value"),
        ("between 1 and 3 years", 1, 3, "years", "value"),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "In 2015, the HX-4000 and the XR200 replaced the CP-40 [12].",
        "See Figure 3, Table 2 and page 17 of the 2nd edition.",
        "The effect was significant (p < 0.05; HR 0.7, n = 312).",
        "In the 1960s, budgets ranged from $2.16m to $2.78m.",
        "mcm 5 s 2 U is required for decoding; Exp5 blocks 60S export in C57BL/6J mice.",
    ],
)
def test_years_references_figures_codes_p_values_and_names_are_not_quantities(text: str) -> None:
    assert quantities(text) == []


def test_a_negated_comparison_bounds_the_other_way_and_a_range_may_change_unit() -> None:
    assert read("Do not operate the pump above 40 °C.") == [("not above 40 °C", 40, 40, "°C", "upper")]
    assert read("The pressure must not exceed 16 bar.") == [("not exceed 16 bar", 16, 16, "bar", "upper")]
    assert read("The usual dose is 500 mg to 1 g.") == [("500 mg to 1 g", 0.5, 1, "g", "value")]


def test_a_confidence_level_is_not_a_finding_and_a_spread_belongs_to_its_mean() -> None:
    assert [q.text for q in quantities("Mortality fell by 30% (95% CI 20%-40%).")] == ["30%", "20%-40%"]
    assert [q.text for q in quantities("It was found in 59 ± 5% of cells.")] == ["59%"]


def test_a_list_and_a_blood_pressure_share_the_unit_written_after_them() -> None:
    assert [q.text for q in quantities("Doses of 10, 20 and 30 mg were tested.")] == [
        "10 mg",
        "20 mg",
        "30 mg",
    ]
    assert [q.low for q in quantities("BP 120/80 mmHg.")] == [120, 80]
    # A year or a count before a quantity is not in its list.
    assert [q.text for q in quantities("In 2019, 30 mg was given; in 2019 and 2020 5 mg, to 12, 40 mg.")] == [
        "30 mg",
        "5 mg",
        "40 mg",
    ]


def test_tables_give_bare_numbers_the_unit_and_bound_of_their_column() -> None:
    assert ("16 bar", 16, 16, "bar", "upper") in read(DEVICE_TABLE)
    assert ("60 L/min", 60, 60, "L/min", "value") in read(DEVICE_TABLE)
    assert read(CSV_ROW) == [
        ("16 bar", 16, 16, "bar", "upper"),
        ("60 L/min", 60, 60, "L/min", "value"),
        ("750 W", 750, 750, "W", "value"),
    ]


def test_codes_are_read_whatever_their_spelling() -> None:
    assert identifiers("The HX-4000 and the xr200 (not 2019, not 16 bar)") == {"HX4000", "XR200"}


@pytest.mark.parametrize(
    ("claim", "passage", "said"),
    [
        # The defect: a device table's row says 16 bar; the other rows are other devices.
        (
            "The max pressure of the HX-4000 is 10 bar.",
            DEVICE_TABLE,
            "it states 10 bar, where the source states 16 bar",
        ),
        (
            "The max pressure of the HX-4000 is 10 bar.",
            CSV_ROW,
            "it states 10 bar, where the source states 16 bar",
        ),
        ("The HX-4000 draws 550 W.", DEVICE_TABLE, "it states 550 W, where the source states 750 W"),
        (
            "Give 5 mg of drug X.",
            "The dose of drug X is 50 mg.",
            "it states 5 mg, where the source states 50 mg",
        ),
        ("Mortality fell by 30%.", "Mortality fell by 3%.", "it states 30%, where the source states 3%"),
        # Rounding allows for the coarser figure's last digit, not for both added.
        ("Mortality fell by 5%.", "Mortality fell by 4%.", "it states 5%, where the source states 4%"),
        # A claimed maximum is compared with the passage's maximum, not with any pressure it names.
        (
            "The maximum pressure is 10 bar.",
            "The operating pressure is 6 bar; the maximum pressure is 16 bar.",
            "it states 10 bar, where the source states 16 bar",
        ),
        # A claimed value is compared with the values the passage states, not with any bound on a
        # quantity of that kind (here a body weight); the answer names the closest in wording.
        (
            "The usual adult dose of paracetamol is 5 g.",
            PARACETAMOL,
            "it states 5 g, where the source states 500 mg to 1 g",
        ),
        (
            "The maximum daily dose of paracetamol is 8 g.",
            PARACETAMOL,
            "it states 8 g, where the source states 4 g",
        ),
        # A value above the most the passage allows.
        (
            "The pump runs at 20 bar.",
            "Rated for up to 16 bar.",
            "it states 20 bar, where the source states up to 16 bar",
        ),
        (
            "Doses between 2 and 4 mg are safe.",
            "Doses of 8 mg were safe.",
            "it states between 2 and 4 mg, where the source states 8 mg",
        ),
    ],
)
def test_a_claimed_quantity_the_passage_states_otherwise_disagrees(
    claim: str, passage: str, said: str
) -> None:
    found = disagreement(claim, passage)
    assert found is not None and found.describe() == said


@pytest.mark.parametrize(
    ("claim", "passage"),
    [
        ("The max pressure of the HX-4000 is 16 bar.", DEVICE_TABLE),
        ("The max pressure of the HX-4000 is 16 bar.", CSV_ROW),
        # The same quantity in another unit, or rounded.
        ("The max pressure of the HX-4000 is 232 psi.", DEVICE_TABLE),
        ("Give 5 mg of drug X.", "The dose of drug X is 5000 µg."),
        ("Give 0.5 g of drug X.", "The dose of drug X is 500 mg."),
        ("Mortality fell by 30%.", "Mortality fell by 29.6% (95% CI 20%-40%)."),
        ("Store it at 41 °F.", "Store the pump above 5 °C."),
        # 200 feet is 61 m, and a PDF's line may break inside "more than".
        (
            "It alerts when altitudes disagree by more than 61 m.",
            "It alerts when they disagree by more\nthan 200 feet.",
        ),
        ("Take at most 2500 mg per day.", "Take up to 2.5 g daily."),
        ("The usual adult dose of paracetamol is 1 g every 6 hours.", PARACETAMOL),
        ("The maximum daily dose of paracetamol is 4000 mg.", PARACETAMOL),
        # Within a range or a bound the passage states.
        ("The pump runs at 10 bar.", "Rated for up to 16 bar."),
        ("Mortality fell by more than 20%.", "Mortality fell by 29.6%."),
        ("Doses between 2 and 4 mg are safe.", "Doses of 3 mg were safe."),
        # The claim's value stated anywhere in the passage.
        ("Give 20 mg.", "Doses of 10, 20 and 30 mg were tested."),
        # ... whatever the passage makes of it.
        (
            "The concentration reached 5 mg/L.",
            "The peak concentration was 5 mg/L; trough levels were 1 mg/L.",
        ),
    ],
)
def test_a_quantity_the_passage_states_the_same_agrees(claim: str, passage: str) -> None:
    assert disagreement(claim, passage) is None


@pytest.mark.parametrize(
    ("claim", "passage"),
    [
        # Another kind of quantity: watts are not bar.
        ("The max pressure of the HX-4000 is 10 bar.", "The HX-4000 motor is rated 750 W, 230 V."),
        # Years, references, figures, codes and p-values are not quantities of the claim.
        ("The HX-4000 was introduced in 2019.", "The HX-4000 was introduced in 2021 [12] (Figure 4)."),
        ("The XR200 replaced the XR100 in 2019.", "The XR300 replaced the XR200, see page 12."),
        ("Aspirin lowers mortality (p < 0.05).", "Aspirin lowered mortality by 12% (p = 0.001)."),
        # A passage that states nothing of that kind says nothing either way.
        ("The max pressure of the HX-4000 is 10 bar.", "The HX-4000 is a booster pump."),
    ],
)
def test_numbers_that_are_not_the_claims_quantities_never_disagree(claim: str, passage: str) -> None:
    assert disagreement(claim, passage) is None


def test_two_maxima_must_be_the_same_maximum_while_a_value_need_only_fit_under_one() -> None:
    [max_10] = quantities("max 10 bar")
    [max_16] = quantities("max 16 bar")
    [at_10] = quantities("at 10 bar")
    assert not consistent(max_10, max_16)
    assert consistent(at_10, max_16)
    assert consistent(max_10, at_10)


def test_numbers_written_as_words_are_read_as_their_digits() -> None:
    assert read("Prime the pump for ten minutes, then wait Twenty-five seconds.") == [
        ("10 minutes", 10, 10, "minutes", "value"),
        ("25 seconds", 25, 25, "seconds", "value"),
    ]
    assert read("One of the two pumps failed.") == []  # counts without a unit state no quantity
    assert disagreement("The pump must be primed for ten minutes.", "Pump priming takes 2 minutes.")
    assert disagreement("The pump must be primed for two minutes.", "Pump priming takes 2 minutes.") is None


def test_a_torque_is_one_unit_written_with_its_hyphen_and_compares_across_units() -> None:
    # "30 ft-lbs" was read as a mass of 30 lbs, "150 inch-pounds" as 150 pounds, "25 in-lb" as 25 lb.
    assert [
        (q.text, q.dimension) for q in quantities("Torque the nut to 30 ft-lbs, the bolt to 25 in-lb.")
    ] == [
        ("30 ft-lbs", "torque"),
        ("25 in-lb", "torque"),
    ]
    assert [q.dimension for q in quantities("150 inch-pounds, 12 N·m, a 25 lb weight")] == [
        "torque",
        "torque",
        "mass",
    ]
    assert disagreement("The nut is torqued to 50 in-lb.", "Torque the nut to 12 N·m.") is not None
    assert disagreement("The nut is torqued to 106 in-lb.", "Torque the nut to 12 N·m.") is None


def test_a_negative_figure_the_passage_writes_is_no_disagreement() -> None:
    # A sentence of the guide against its own passage: "-0.013" was looked for as "0.013" and found
    # missing, so the quoted sentence was said to state its own figure otherwise.
    passage = (
        "| 1500 / 200 | 0.735, 0.965 | 0.731, 0.965 | |\n\nThese are single-sample figures. Checked on the "
        "300 test claims, `dbsf` stays: min-max `weighted` loses 0.007 nDCG@10 to it (95% CI -0.013 to "
        "-0.001)."
    )

    assert disagreement("Min-max weighted loses 0.007 to it (95% CI -0.013 to -0.001).", passage) is None
    assert disagreement("Min-max weighted loses 0.007 to it (95% CI -0.019 to -0.001).", passage) is not None


def test_a_figure_stated_with_the_other_sign_is_a_disagreement() -> None:
    # Compared without their signs since 7874f62, -0.5 and 0.5 were the same figure: a sign flip is
    # what a claim most often gets wrong.
    lower = "The HbA1c change was -0.5 with metformin."
    higher = "The HbA1c change was 0.5 with metformin."

    assert disagreement(lower, higher) is not None and disagreement(higher, lower) is not None
    # A hyphen read as a minus in the claim is written the same way in the passage: no disagreement.
    il23 = "Interleukin (IL)-23 drives IL-17 production in these T cells."
    assert disagreement(il23, il23) is None
