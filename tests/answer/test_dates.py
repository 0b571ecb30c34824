"""Years and dates a cited sentence states that its passage does not write (citeline.answer.dates)."""

from __future__ import annotations

import pytest

from citeline.answer.dates import WrittenDates, stated_dates, unwritten

DIRECTIVE = (
    "This AD was issued in 2009 and becomes effective March 13, 2019. It requires the inspection "
    "described in Service Bulletin 737-27-1318, dated June 24, 2020 (FAA-2020-0686)."
)


def missing(sentence: str, *passage: str) -> list[str]:
    return unwritten(stated_dates(sentence), WrittenDates.of(passage))


def test_a_year_or_date_the_passage_writes_otherwise_is_unwritten() -> None:
    assert missing("The directive was issued in 2007.", DIRECTIVE) == ["2007"]
    assert missing("It becomes effective on March 14, 2019.", DIRECTIVE) == ["March 14, 2019"]
    assert missing("The directive was issued in 2009.", DIRECTIVE) == []
    assert missing("It becomes effective on March 13, 2019.", DIRECTIVE) == []


def test_a_year_is_written_in_any_form_a_date_or_month_holds_it() -> None:
    for passage in ("Issued 13/03/2019.", "Issued March 2019.", "Issued 2019-03-13.", "Budget for FY2019."):
        assert missing("It was issued in 2019.", passage) == [], passage
    assert missing("It was issued in 2019.", "Issued in '19, revised later.") == []
    assert missing("It was issued in 2019.", "Issued 13/03/19.") == []


def test_a_date_is_written_in_any_form_but_only_at_its_own_precision() -> None:
    for passage in (
        "effective 13 March 2019",
        "effective 2019-03-13",
        "effective 13/03/2019",
        "on the 13th of March, 2019",
    ):
        assert missing("It becomes effective on March 13, 2019.", passage) == [], passage
        assert missing("It becomes effective in March 2019.", passage) == [], passage
    # The day (or month) is the sentence's own: a passage giving only the month or the year holds none.
    assert missing("It becomes effective on March 13, 2019.", "It becomes effective in March 2019.") == [
        "March 13, 2019"
    ]
    assert missing("It becomes effective in April 2019.", "It becomes effective in 2019.") == ["April 2019"]
    # A day and month without a year hold the date in a year the passage writes.
    assert missing("It took effect on March 13, 2019.", "Signed in 2019; it takes effect on March 13.") == []


def test_a_numeric_date_with_day_and_month_both_twelve_or_less_reads_either_way() -> None:
    assert missing("It was signed on 03/04/2019.", "Signed April 3, 2019.") == []
    assert missing("It was signed on 03/04/2019.", "Signed March 4, 2019.") == []
    assert missing("It was signed on 03/04/2019.", "Signed March 5, 2019.") == ["03/04/2019"]


def test_ranges_decades_and_fiscal_years() -> None:
    assert missing("The study ran from 2019-2021.", "The study ran 2019 to 2021.") == []
    assert missing("The study ran in 2019\u201322.", "The study ran 2019 to 2021.") == ["2022"]
    # A range the passage writes holds each year in it; a decade, any year of it.
    assert missing("It was measured in 2020.", "It was measured over 2019-2021.") == []
    assert missing("It was common in the 1990s.", "It was common in 1995.") == []
    assert missing("It was common in 1995.", "It was common in the 1990s.") == ["1995"]
    assert missing("Spending rose in FY2019.", "Spending rose in fiscal year 2018.") == ["FY2019"]


@pytest.mark.parametrize(
    "sentence",
    [
        "The maximum dose is 1500 mg, or 2000 mg in adults.",  # quantities (their own check)
        "See page 2019 and No. 1999 of the register.",  # what a label numbers
        "Docket FAA-2020-0686 names Service Bulletin 737-27-1318.",  # codes (their own check)
        "Federal Register document 2020-17221 gives it.",  # a document number, not a range
        "It weighs 2,019 kg; the ratio is 2019.5; it was fine in '19 and FY19.",  # no four-digit years
    ],
)
def test_numbers_of_quantities_codes_labels_and_two_digit_years_are_not_read_as_years(sentence: str) -> None:
    assert stated_dates(sentence) == ()


def test_what_a_passage_is_read_under_writes_counts() -> None:
    assert missing("The 2019 report says so.", "The report says so.", "Annual report 2019") == []
