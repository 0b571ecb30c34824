"""Years and dates a cited sentence states that its passage does not write.

Meaning and shared words do not compare years: "The directive was issued in 2007 [1]" reads as close
to a passage saying it was issued in 2009 as to one saying 2007, and "effective March 14, 2019"
as close to "effective March 13, 2019" as to itself. A passage that does not write a year or date the
sentence states (in any form, or in what it is read under: its document's title and name, its
section) does not back the sentence.

What a sentence states (:func:`stated_dates`):

- a date: "March 14, 2019", "14 March 2019", "14th of March, 2019", "2019-03-14", "14/03/2019" (a
  day and a month both 12 or less read either way round: "03/04/2019" is 3 April or 4 March);
- a month of a year: "March 2019", "March of 2019";
- a year, 1900 to 2099: alone, each end of a range ("2019-2021", "2019-21", with any dash), fiscal ("FY2019");
- a decade: "the 1990s".

Not years: the numbers of a code ("FAA-2020-0686", "737-31-1860", "2020-17221": the names check
compares codes), of a quantity ("2000 mg": the quantities check compares those), with a thousands
separator or decimals ("2,019", "2019.5"), after a label ("page 2019", "No. 1999"), and years of two
digits ("'19", "FY19", which do not say their century). A count of four digits ("2000 patients") is
read as a year, and a passage writing that number in any form ("2,000") holds it, so only a number the
passage never writes is flagged, as it should be. A day and month without a year ("on March 14") are
not read.

What a passage writes (:class:`WrittenDates`) is read leniently, so that a year written in another
form is never taken for a year unwritten: every four-digit number from 1900 to 2099 it writes,
whatever surrounds it ("FY2019", "13/03/2019", a code's "FAA-2020-0686"); each year of a range
("2019-2021" holds 2020); the last two digits of a year of two ("'19", "FY19", "13/03/19"); each
decade; each date and month of a year in the forms above; and each day and month written without a
year, which hold that date in any year the passage writes.

A year is held when the passage writes it in any form ("2019" by "13/03/2019", "March 2019" or
"FY2019"), a decade when it writes the decade or a year of it. A month of a year, and a date, are held
only at their own precision: "March 13, 2019" is not held by "March 2019", whose day came from
elsewhere, nor by "March 14, 2019".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from citeline.answer.quantities import labelled, quantities

_MONTH_NAMES = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_MONTHS = {name: n for n, name in enumerate(_MONTH_NAMES, start=1)} | {
    name[:3]: n for n, name in enumerate(_MONTH_NAMES, start=1)
}
_MONTHS["sept"] = 9
# Capitalised or in capitals, never in small letters: "may" and "mar" are verbs.
_MONTH = "(?:{})".format(
    "|".join(f"{name.capitalize()}|{name.upper()}" for name in sorted(_MONTHS, key=len, reverse=True))
)
_MONTH_GROUP = rf"\b(?P<month>{_MONTH})\.?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
# Not a year: a digit, a letter or a decimal right after it, or a dash or slash and more digits.
_YEAR_END = r"(?![\w%°]|[.,]\d|\s?[-\u2013\u2014/]\s?\d)"

_DATES = (
    re.compile(rf"(?<![\w-]){_YEAR}(?P<sep>[-/])(?P<m>[01]?\d)(?P=sep)(?P<d>[0-3]?\d)(?![\w-])"),
    re.compile(rf"{_MONTH_GROUP}\s+{_DAY}(?:,\s*|\s+){_YEAR}(?!\d)"),
    re.compile(rf"\b(?:the\s+)?{_DAY}(?:\s+of)?\s+{_MONTH_GROUP},?\s+{_YEAR}(?!\d)"),
)
# "14/03/2019", "03.04.19": which of the first two numbers is the day is not said.
_NUMERIC_DATE = re.compile(
    r"(?<![\w./-])(?P<a>[0-3]?\d)(?P<sep>[./-])(?P<b>[0-3]?\d)(?P=sep)(?P<y>(?:19|20)\d\d|\d\d)(?![\w/-]|[.]\d)"
)
_MONTH_YEAR = re.compile(rf"{_MONTH_GROUP},?(?:\s+of)?\s+{_YEAR}(?!\d)")
_RANGE = re.compile(
    rf"(?<![\w.,/$#§:-]){_YEAR}\s?[-\u2013\u2014/]\s?(?P<end>(?:19|20)\d\d|\d\d)(?![\w%°]|[.,]\d|[-/]\d)"
)
_DECADE = re.compile(r"(?<![\w.,/$#§:-])(?P<decade>(?:19|20)\d0)['\u2019]?s\b")
_FISCAL = re.compile(rf"\bFY\s?{_YEAR}(?!\d)")
_BARE = re.compile(rf"(?<![\w.,/$€£¥#§:\u2013\u2014-]){_YEAR}{_YEAR_END}")
_DIGITS = re.compile(r"\d+")

# What a passage writes, whatever surrounds it.
_ANY_YEAR = re.compile(r"(?<!\d)(?:19|20)\d\d(?!\d)")
_THOUSANDS = re.compile(r"(?<![\d,])(\d),(\d{3})(?![\d,]|\.\d)")
_ANY_RANGE = re.compile(r"(?<!\d)((?:19|20)\d\d)\s?[-\u2013\u2014/]\s?((?:19|20)\d\d|\d\d)(?!\d)")
_SHORT_YEAR = re.compile(r"(?:['\u2019]|\bFY\s?)(\d\d)(?!\d)")
_DAY_MONTH = (
    re.compile(rf"{_MONTH_GROUP}\s+{_DAY}\b"),
    re.compile(rf"\b{_DAY}(?:\s+of)?\s+{_MONTH_GROUP}"),
)
# The longest range read as one: "1999-2001" holds 2000; "1900-2099" is no list of years.
_MAX_RANGE = 50

Kind = Literal["date", "month", "year", "decade"]


@dataclass(frozen=True)
class StatedDate:
    """A year, decade, month of a year or date a sentence states, as written (``text``), with the
    readings it may have (``values``: one, or two for a date whose day and month may be swapped)."""

    text: str
    kind: Kind
    values: frozenset[tuple[int, ...]]


@dataclass(frozen=True)
class WrittenDates:
    """The years, decades, months of a year and dates a passage writes (see the module docstring), read
    once however many sentences are checked against it."""

    years: frozenset[int]
    short_years: frozenset[int]
    decades: frozenset[int]
    months: frozenset[tuple[int, int]]
    dates: frozenset[tuple[int, int, int]]
    days: frozenset[tuple[int, int]]

    @classmethod
    def of(cls, texts: Iterable[str]) -> WrittenDates:
        years: set[int] = set()
        short: set[int] = set()
        decades: set[int] = set()
        months: set[tuple[int, int]] = set()
        dates: set[tuple[int, int, int]] = set()
        days: set[tuple[int, int]] = set()
        for text in texts:
            for stated in _read(text, strict=False):
                for value in stated.values:
                    if stated.kind == "date":
                        dates.add((value[0], value[1], value[2]))
                        months.add((value[0], value[1]))
                        years.add(value[0])
                    elif stated.kind == "month":
                        months.add((value[0], value[1]))
                    elif stated.kind == "decade":
                        decades.add(value[0])
            years.update(int(m.group(0)) for m in _ANY_YEAR.finditer(text))
            years.update(int(m.group(1) + m.group(2)) for m in _THOUSANDS.finditer(text))
            for match in _ANY_RANGE.finditer(text):
                start, end = int(match.group(1)), _range_end(match.group(1), match.group(2))
                if start < end <= start + _MAX_RANGE:
                    years.update(range(start, end + 1))
            short.update(int(m.group(1)) for m in _SHORT_YEAR.finditer(text))
            for pattern in _DAY_MONTH:
                for match in pattern.finditer(text):
                    if _valid(2000, _month(match.group("month")), int(match.group("day"))):
                        days.add((_month(match.group("month")), int(match.group("day"))))
        return cls(
            frozenset(years),
            frozenset(short),
            frozenset(decades),
            frozenset(months),
            frozenset(dates),
            frozenset(days),
        )

    def holds(self, stated: StatedDate) -> bool:
        """Whether the passage writes ``stated``, at its precision (see the module docstring)."""
        if stated.kind == "date":
            return any(
                (v[0], v[1], v[2]) in self.dates or ((v[1], v[2]) in self.days and v[0] in self.years)
                for v in stated.values
            )
        if stated.kind == "month":
            return any((v[0], v[1]) in self.months for v in stated.values)
        if stated.kind == "decade":
            return any(
                v[0] in self.decades or any(y in self.years for y in range(v[0], v[0] + 10))
                for v in stated.values
            )
        return any(v[0] in self.years or v[0] % 100 in self.short_years for v in stated.values)


def stated_dates(sentence: str) -> tuple[StatedDate, ...]:
    """The dates, months of a year, years and decades ``sentence`` states, in that order of reading (a
    date's year is not read again as a year); see the module docstring for what is not a year."""
    return tuple(_read(sentence, strict=True))


def unwritten(stated: Sequence[StatedDate], written: WrittenDates) -> list[str]:
    """Of ``stated`` (:func:`stated_dates` of a sentence), those ``written`` (a passage's) does not hold,
    as the sentence writes them."""
    return [s.text for s in stated if not written.holds(s)]


def _read(text: str, *, strict: bool) -> Iterator[StatedDate]:
    """The dates of ``text``, each span read once: the most precise reading first. ``strict`` leaves out
    the numbers a sentence writes that may be no years (a quantity's, a label's)."""
    blanked = text
    found: list[tuple[int, StatedDate]] = []

    def take(match: re.Match[str], stated: StatedDate | None) -> None:
        nonlocal blanked
        if stated is not None:
            found.append((match.start(), stated))
        blanked = blanked[: match.start()] + " " * (match.end() - match.start()) + blanked[match.end() :]

    for pattern in _DATES:
        for match in pattern.finditer(blanked):
            groups = match.groupdict()
            month = int(groups["m"]) if groups.get("m") else _month(groups["month"])
            day = int(groups["d"] if groups.get("d") else groups["day"])
            year = int(groups["year"])
            valid = _valid(year, month, day)
            take(match, StatedDate(_text(match), "date", frozenset({(year, month, day)})) if valid else None)
    for match in _NUMERIC_DATE.finditer(blanked):
        a, b, y = int(match.group("a")), int(match.group("b")), match.group("y")
        centuries = [int(y)] if len(y) == 4 else [1900 + int(y), 2000 + int(y)]
        values = frozenset(
            (year, month, day)
            for year in centuries
            for day, month in ((a, b), (b, a))
            if _valid(year, month, day)
        )
        # A sentence's two-digit year does not say its century; a passage's holds either.
        if values and (len(y) == 4 or not strict):
            take(match, StatedDate(_text(match), "date", values))
    for match in _MONTH_YEAR.finditer(blanked):
        value = (int(match.group("year")), _month(match.group("month")))
        take(match, StatedDate(_text(match), "month", frozenset({value})))
    for match in _RANGE.finditer(blanked):
        start, end = int(match.group("year")), _range_end(match.group("year"), match.group("end"))
        if start < end <= start + _MAX_RANGE:
            found.append((match.start(), _year(match.group("year"))))
            found.append((match.start("end"), _year(str(end))))
            take(match, None)
    for match in _DECADE.finditer(blanked):
        take(match, StatedDate(_text(match), "decade", frozenset({(int(match.group("decade")),)})))
    for match in _FISCAL.finditer(blanked):
        take(match, StatedDate(_text(match), "year", frozenset({(int(match.group("year")),)})))
    in_quantities = (
        {n for q in quantities(text) for n in _DIGITS.findall(q.text.replace(",", ""))} if strict else set()
    )
    for match in _BARE.finditer(blanked):
        number = match.group("year")
        if strict and (number in in_quantities or labelled(text[: match.start()])):
            continue
        found.append((match.start(), _year(number)))
    seen: set[str] = set()
    for _, stated in sorted(found, key=lambda item: item[0]):
        if stated.text not in seen:
            seen.add(stated.text)
            yield stated


def _year(text: str) -> StatedDate:
    return StatedDate(text, "year", frozenset({(int(text),)}))


def _text(match: re.Match[str]) -> str:
    return match.group(0).strip()


def _month(name: str) -> int:
    return _MONTHS[name.rstrip(".").lower()]


def _range_end(start: str, end: str) -> int:
    """The year a range ends in: "2019-21" ends in 2021."""
    return int(end) if len(end) == 4 else int(start[:2] + end)


def _valid(year: int, month: int, day: int) -> bool:
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return False
    return day <= (29 if month == 2 else 30 if month in (4, 6, 9, 11) else 31)
