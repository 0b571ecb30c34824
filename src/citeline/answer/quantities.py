"""Quantities a claim states, checked against those a passage states about the same thing.

The stance classifier (:mod:`citeline.answer.nli`) does not compare numbers: over a device table whose
row says 16 bar, it found "The max pressure of the HX-4000 is 10 bar." supported. A verdict that
confirms a wrong dose, pressure or percentage is the worst failure an answer can have, so
:func:`disagreement` looks for one before a passage may count as supporting a claim.

What counts as a quantity is a number **with a unit** (:data:`UNITS`: pressure, mass, volume, length,
time, temperature, electrical, torque, concentration, percentages, ...), so years, reference numbers
(``[12]``), figure, table and page numbers, p-values and model codes (``HX-4000``, ``XR200``) never
are. A quantity is read as:

- a value (``16 bar``), a range (``between 2 and 4 bar``, ``2-4 bar``, ``500 mg to 1 g``), or a
  bound: an upper one (``up to``, ``at most``, ``less than``, ``below``, ``<``, or ``max``/``maximum``
  earlier in its clause: "the maximum pressure is 16 bar") or a lower one (``at least``, ``more
  than``, ``above``, ``>``, ``min``/``minimum``), turned by a negation ("must not exceed 16 bar");
- in a table, a bare number takes the unit (and a max/min) of its column's header: ``| Max pressure
  (bar) |`` in Markdown, ``max_pressure_bar: 16`` as CSV rows are written;
- units of one kind are converted (mg and g, mm and cm, bar and psi, °C and °F, mL/min and L/h ...).

A claim's quantity **disagrees** with a passage when the passage states quantities of the same kind
(same dimension, and the same bound when the passage states some: a claimed maximum is compared with
the passage's maxima, a claimed value with its values and ranges) and none of them is consistent with
it: equal up to the precision the coarser is written with, or overlapping it as a range or bound. A
passage that states none of that kind says nothing either way. When the claim names a code
(``HX-4000``) and some of the passage's sentences or table rows name it, the rows and sentences naming
only other codes are left out: a table's other rows are other devices.

A **bare figure** (:func:`figures`) is a number without a unit that is a value ("the threshold is
0.25"), not a year, a reference, a label's number ("type 1", "page 17"), a p-value, a code or a number
of a list sharing a unit. A claimed bare figure says nothing of what it measures, so only that number
written somewhere in the passage (in anything) bears it out; a passage that writes other bare figures
and never it disagrees, even when the claim's value lies within a range the passage states.

Numbers written as words up to ninety-nine ("ten minutes", "twenty-five mg") are read as digits.
What it does not do: larger numbers in words ("a hundred"), quantities without a unit (counts, ratios,
hazard ratios), "reduced by 30%" against "reduced to 70%", and which quantity a number is beyond its
unit and bound (an operating pressure and a test pressure, both in bar, are one kind here).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from citeline.answer.support import sentence_spans, table_rule
from citeline.types import table_cells

Bound = Literal["value", "upper", "lower"]
"""What a quantity states: a value (or a range), the most it can be, or the least."""


@dataclass(frozen=True)
class Unit:
    """A unit: its kind (``dimension``) and how to convert it to that kind's base unit."""

    symbol: str
    dimension: str
    scale: float
    offset: float = 0.0


def _units() -> dict[str, Unit]:
    table: dict[str, tuple[str, float]] = {}

    def add(dimension: str, scale: float, *symbols: str) -> None:
        for symbol in symbols:
            table[symbol] = (dimension, scale)

    add("pressure", 1e5, "bar")
    add("pressure", 100.0, "mbar", "hPa")
    add("pressure", 1.0, "Pa")
    add("pressure", 1e3, "kPa")
    add("pressure", 1e6, "MPa")
    add("pressure", 6894.757, "psi")
    add("pressure", 133.322, "mmHg", "mm Hg")
    add("pressure", 98.0665, "cmH2O", "cm H2O")
    add("pressure", 101325.0, "atm")
    add("mass", 1e3, "kg")
    add("mass", 1.0, "g", "gram", "grams")
    add("mass", 1e-3, "mg", "milligram", "milligrams")
    add("mass", 1e-6, "µg", "μg", "ug", "mcg", "microgram", "micrograms")
    add("mass", 1e-9, "ng")
    add("volume", 1.0, "L", "l", "litre", "litres", "liter", "liters")
    add("volume", 0.1, "dL", "dl")
    add("volume", 1e-3, "mL", "ml", "cc")
    add("volume", 1e-6, "µL", "μL", "uL", "ul")
    add("volume", 1e3, "m3", "m³")
    add("length", 1e3, "km")
    add("length", 1.0, "m")
    add("length", 1e-2, "cm")
    add("length", 1e-3, "mm")
    add("length", 1e-6, "µm", "μm")
    add("length", 1e-9, "nm")
    add("length", 0.3048, "ft", "foot", "feet")
    add("length", 0.0254, "inch", "inches")
    add("mass", 453.59237, "lb", "lbs", "pound", "pounds")
    add("length/time", 0.514444, "knot", "knots")
    add("length/time", 0.44704, "mph")
    add("area", 1.0, "m2", "m²")
    add("time", 1e-3, "ms")
    add("time", 1.0, "s", "sec", "second", "seconds")
    add("time", 60.0, "min", "mins", "minute", "minutes")
    add("time", 3600.0, "h", "hr", "hrs", "hour", "hours")
    add("time", 86400.0, "day", "days")
    add("time", 7 * 86400.0, "week", "weeks", "wk")
    add("time", 30.4375 * 86400.0, "month", "months")
    add("time", 365.25 * 86400.0, "year", "years", "yr", "yrs")
    add("voltage", 1.0, "V", "volt", "volts")
    add("voltage", 1e3, "kV")
    add("voltage", 1e-3, "mV")
    add("power", 1.0, "W", "watt", "watts")
    add("power", 1e3, "kW")
    add("power", 1e-3, "mW")
    add("current", 1e-3, "mA")
    add("frequency", 1.0, "Hz")
    add("frequency", 1e3, "kHz")
    add("frequency", 1e6, "MHz")
    add("rotation", 1.0, "rpm")
    add("energy", 1.0, "J")
    add("energy", 1e3, "kJ")
    add("energy", 4184.0, "kcal")
    add("amount", 1.0, "mol")
    add("amount", 1e-3, "mmol")
    add("amount", 1e-6, "µmol", "μmol", "umol")
    add("amount", 1e-9, "nmol")
    add("molarity", 1e-3, "mM")
    add("molarity", 1e-6, "µM", "μM", "uM")
    add("molarity", 1e-9, "nM")
    add("activity", 1.0, "IU")
    add("molecular mass", 1.0, "Da")
    add("molecular mass", 1e3, "kDa", "kD")
    add("molecular mass", 1e6, "MDa")
    # Written with the hyphen, as manuals do: "25 in-lb" read "in" and then a mass of 25 lb before.
    add("torque", 1.0, "N·m", "N-m", "Nm")
    add("torque", 0.112984829, "in-lb", "in-lbs", "in.-lb", "in.-lbs", "lb-in", "inch-pound", "inch-pounds")
    add("torque", 1.3558179483, "ft-lb", "ft-lbs", "ft.-lb", "ft.-lbs", "lb-ft", "foot-pound", "foot-pounds")
    add("percent", 1.0, "%", "percent", "per cent")
    add("fold", 1.0, "fold")
    units = {symbol: Unit(symbol, dimension, scale) for symbol, (dimension, scale) in table.items()}
    for symbol in ("°C", "ºC", "degrees Celsius", "degrees C", "deg C"):
        units[symbol] = Unit(symbol, "temperature", 1.0)
    for symbol in ("°F", "ºF", "degrees Fahrenheit", "degrees F", "deg F"):
        units[symbol] = Unit(symbol, "temperature", 5 / 9, -32 * 5 / 9)
    return units


UNITS: dict[str, Unit] = _units()
"""Every unit a quantity may be stated in, by the symbols or words it is written with."""

# Denominators of compound units ("mg/kg", "mL per minute", "mg daily") beyond the units themselves.
_PER: dict[str, Unit] = {
    **{s: u for s, u in UNITS.items() if u.dimension in {"mass", "volume", "time", "area", "length"}},
    "d": UNITS["day"],
    "daily": UNITS["day"],
    "dose": Unit("dose", "dose", 1.0),
}

# Case-insensitive spellings for tables' headers ("max_pressure_bar", "power_w", "temp_c"), where a
# unit is one word among others and capitals are lost. A case-sensitive unit keeps its own spelling.
_HEADER_UNITS: dict[str, Unit] = {
    **{s.lower(): u for s, u in reversed(UNITS.items()) if " " not in s},
    "c": UNITS["°C"],
    "f": UNITS["°F"],
    "pct": UNITS["%"],
    "mm": UNITS["mm"],
    "m": UNITS["m"],
    "ms": UNITS["ms"],
    "mw": UNITS["mW"],
}


def _alternatives(symbols: Sequence[str]) -> str:
    return "|".join(re.escape(s).replace(r"\ ", r"\s") for s in sorted(symbols, key=len, reverse=True))


_NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+"
_SIGN = r"[-\u2212]?"
# A number is not a quantity's when it is part of a code, a version, a power of ten or a fraction:
# "HX-4000", "XR200", "v2.1", "10^9", "3/4".
_BEFORE = r"(?<![\w.,^\u2212-])(?<![A-Za-z]/)"
_UNIT = rf"(?:{_alternatives(list(UNITS))})"
_PER_UNIT = rf"(?:{_alternatives(list(_PER))})"
_COMPOUND = rf"{_UNIT}(?:\s?(?:/|\bper\s)\s?{_PER_UNIT})*(?:\s+daily)?"
# After a unit: not more letters ("5 months" is not "5 m"), and a hyphenated "-fold", "-year", "-mg".
# A range's first unit is not followed by a hyphen and letters: "30 ft-lbs" is one unit, not "ft" to
# "lbs".
_AFTER = r"(?![A-Za-z0-9µμ²³°])"
_RANGE_JOIN = r"\s?(?:-|\u2013|\u2014|to)\s?"
_QUANTITY = re.compile(
    rf"{_BEFORE}(?:(?P<between>between|from)\s+)?"
    rf"(?P<low>{_SIGN}(?:{_NUMBER}))(?:\s?(?P<low_unit>{_COMPOUND}){_AFTER}(?!-[A-Za-z]))?"
    rf"(?:(?(between)\s+(?:and|to|-)\s+|{_RANGE_JOIN})(?P<high>{_SIGN}(?:{_NUMBER})))?"
    rf"(?:\s?-?\s?(?P<unit>{_COMPOUND})){_AFTER}",
    re.IGNORECASE,
)
# Matching ignores case so that "Between" and "Percent" match; the unit found is then looked up as
# written (see _unit_of), since for symbols case matters.


def _comparison(*phrases: str) -> re.Pattern[str]:
    """Phrases just before a number, as whole words, their spaces any whitespace (PDF text wraps
    lines mid-phrase: "for more\\nthan 5 seconds"). "thunder" or "moreover" compare nothing."""
    alternatives = "|".join(
        re.escape(p).replace(r"\ ", r"\s+") for p in sorted(phrases, key=len, reverse=True)
    )
    return re.compile(rf"(?<![A-Za-z])(?:{alternatives})\s*$", re.IGNORECASE)


_UPPER_NEAR = _comparison(
    "up to", "at most", "no more than", "not more than", "less than", "fewer than", "lower than",
    "smaller than", "below", "under", "not exceeding", "not to exceed", "maximum of", "max", "max.",
    "maximum", "≤", "<=", "=<", "<",
)  # fmt: skip
_LOWER_NEAR = _comparison(
    "at least", "no less than", "not less than", "more than", "greater than", "higher than",
    "larger than", "above", "over", "exceed", "exceeds", "exceeding", "in excess of", "upwards of",
    "minimum of", "min", "min.", "minimum", "≥", ">=", "=>", ">",
)  # fmt: skip
# "The max pressure of the HX-4000 is 10 bar": the word naming a maximum may be words away, in the clause.
_UPPER_WORD = re.compile(r"\b(?:max|maximum|maximal|highest|peak|upper limit)\b", re.IGNORECASE)
_LOWER_WORD = re.compile(r"\b(?:min|minimum|minimal|lowest|lower limit)\b", re.IGNORECASE)
_NEGATION = re.compile(r"\b(?:not|never|no)\b|n't\b", re.IGNORECASE)
_APPROXIMATE = _comparison(
    "about", "approximately", "approx", "approx.", "around", "roughly", "nearly", "almost", "some", "~", "≈",
    "ca.",
)  # fmt: skip
_CLAUSE_BREAK = re.compile(r"[,;:()\[\]|]|\band\b|\bwhile\b|\bwhereas\b|\bbut\b", re.IGNORECASE)
_ROLE_WINDOW_WORDS = 8
# A percentage naming a confidence level is not a finding: "95% CI", "90% confidence interval".
_CONFIDENCE = re.compile(r"^\s*(?:CI\b|CrI\b|confidence|credible|prediction interval)", re.IGNORECASE)
# A list before a quantity shares its unit: "10, 20 and 30 mg", "120/80 mmHg". The item next to it
# is joined by "and", "or" or a slash ("In 2019, 30 mg" lists nothing), those before it by commas.
_LISTED_LAST = re.compile(rf"{_BEFORE}({_NUMBER})(?:,?\s+(?:and|or)\s+|\s*/\s*)$")
_LISTED_MORE = re.compile(rf"{_BEFORE}({_NUMBER}),\s*$")
_YEAR = re.compile(r"(?:19|20)\d\d")
# "59 ± 5%", "12.3 +/- 4.5 years": the number before the sign is the quantity.
_SPREAD = re.compile(rf"{_BEFORE}({_SIGN}(?:{_NUMBER}))\s*(?:±|\+/-|\+/\u2212|\+-)\s*$")
# Units that, written against their number, are something else: "the 1960s", "$2.16m", "C57BL/6J".
_SPACED = frozenset({"s", "m", "J"})
_CURRENCY = frozenset("$€£¥")
# Words that say nothing of which quantity a figure is.
_COMMON = frozenset({"the", "and", "for", "was", "were", "with", "are", "is", "of", "that", "this", "its"})
_IDENTIFIER = re.compile(r"(?<![\w-])[A-Za-z]{1,5}[-\u2010\u2011]?\d{1,6}[A-Za-z]{0,3}(?![\w-])")


@dataclass(frozen=True)
class Quantity:
    """A quantity stated in a text: ``low`` to ``high`` in ``unit`` (equal for a value), a bound or not.

    ``text`` is how it reads ("16 bar", "up to 16 bar", "2-4 mg"); ``precision`` is half the last
    digit written, in ``unit`` (``16``: 0.5, ``2.5``: 0.05), the tolerance a rounded figure deserves;
    ``context``, the words that say what it is (its clause before it, or its column's header).
    """

    low: float
    high: float
    unit: Unit
    bound: Bound
    text: str
    precision: float
    approximate: bool = False
    context: str = ""

    @property
    def dimension(self) -> str:
        return self.unit.dimension

    def base(self, value: float) -> float:
        """``value`` in the base unit of the quantity's dimension (percentages and folds as magnitudes)."""
        converted = value * self.unit.scale + self.unit.offset
        return abs(converted) if self.dimension in {"percent", "fold"} else converted

    def interval(self) -> tuple[float, float]:
        """The values the quantity allows, in base units, as written (see :func:`consistent` for slack)."""
        low, high = sorted((self.base(self.low), self.base(self.high)))
        if self.bound == "upper":
            return -math.inf, high
        if self.bound == "lower":
            return low, math.inf
        return low, high


def _converted(value: float, unit: Unit, to: Unit) -> float:
    """``value`` in ``unit`` written in ``to``, a unit of the same kind."""
    return (value * unit.scale + unit.offset - to.offset) / to.scale


def _precision(number: str) -> float:
    digits = number.replace(",", "")
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    return 0.5 * 10.0**-decimals


def _value(number: str) -> float:
    return float(number.replace(",", "").replace("\u2212", "-"))


def _unit_of(written: str) -> Unit | None:
    """The unit (compound ones as one unit of their own kind) of a unit as written, or None."""
    parts = [p.strip() for p in re.split(r"/|\bper\s|\s+(?=daily$)", written.strip()) if p.strip()]
    if not parts:
        return None
    # Case matters for symbols ("5 M" is not 5 m, "60S" not 60 s, "10 MW" not 10 mW); words and
    # longer symbols may be capitalised ("Percent", "PSI").
    written_head = _spaced(parts[0])
    head = UNITS.get(written_head)
    if head is None and len(written_head) >= 3:
        head = UNITS.get(written_head.lower())
    if head is None:
        return None
    unit = head
    for part in parts[1:]:
        per = _PER.get(_spaced(part)) or _PER.get(_spaced(part).lower())
        if per is None:
            return None
        unit = Unit(
            f"{unit.symbol}/{per.symbol}", f"{unit.dimension}/{per.dimension}", unit.scale / per.scale
        )
    return unit


def _spaced(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def quantities(text: str) -> list[Quantity]:
    """The quantities ``text`` states, in order: in its sentences, and in its table rows and fields."""
    return [q for _, found in _scoped(text) for q in found]


def _quantities_in(text: str) -> list[Quantity]:
    found = list(_prose(_numerals(text)))
    found.extend(_fields(text))
    return found


_ONES = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
_TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_WORD_VALUES = {word: n for n, word in enumerate(_ONES)} | {word: 20 + 10 * n for n, word in enumerate(_TENS)}
_NUMBER_WORD = re.compile(
    rf"\b(?:({'|'.join(_TENS)})[-\s]({'|'.join(_ONES[1:10])})|({'|'.join(_TENS + _ONES)}))\b(?=[-\s])",
    re.IGNORECASE,
)


def _numerals(text: str) -> str:
    """``text`` with numbers written as words, up to ninety-nine, in digits: "ten minutes" states a
    time as "10 minutes" does ("one of the pumps" becomes "1 of the pumps", which states nothing)."""

    def digits(match: re.Match[str]) -> str:
        tens, ones, alone = match.groups()
        if alone is not None:
            return str(_WORD_VALUES[alone.lower()])
        return str(_WORD_VALUES[tens.lower()] + _WORD_VALUES[ones.lower()])

    return _NUMBER_WORD.sub(digits, text)


def _prose(text: str) -> Iterator[Quantity]:
    previous_end = 0
    previous: Quantity | None = None
    for match in _QUANTITY.finditer(text):
        unit_text = match.group("unit")
        unit = _unit_of(unit_text)
        if unit is None or (unit.dimension == "percent" and _CONFIDENCE.match(text[match.end() :])):
            continue
        # "500 mg to 1 g" is a range, its low end converted; "5 mg to 10 mL" is the second figure alone.
        low_unit = _unit_of(match.group("low_unit")) if match.group("low_unit") else unit
        if low_unit is None or low_unit.dimension != unit.dimension:
            low_unit = None
        number_end = match.end("high") if match.group("high") else match.end("low")
        if unit.symbol in _SPACED and number_end == match.start("unit"):
            continue  # "the 1960s", "$2.16m"
        if text[max(0, match.start() - 1) : match.start()] in _CURRENCY:
            continue
        if len(unit_text) == 1 and re.match(r"\s+\d", text[match.end() :]):
            continue  # "mcm 5 s 2 U" is a name, not five seconds
        low, high = match.group("low"), match.group("high") or match.group("low")
        if low_unit is None:
            low = high
        before = text[previous_end : match.start()]
        spread = _SPREAD.search(before)
        if spread is not None:
            # "59 ± 5%": the figure is the mean, with the unit written after its spread.
            low = high = spread.group(1)
            before = before[: spread.start()]
        # A range states its values whatever words come before it ("over 2 to 4 weeks").
        bound = _bound(before) if match.group("high") is None else "value"
        if previous is not None and re.fullmatch(r"\s*\(\s*", before):
            bound = previous.bound  # "16 bar (232 psi)": the same quantity in another unit
        quantity = Quantity(
            low=_value(low) if low_unit in (None, unit) else _converted(_value(low), low_unit, unit),
            high=_value(high),
            unit=unit,
            bound=bound,
            text=_reading(
                before,
                match.group(0).strip()
                if spread is None and low_unit is not None
                else f"{low}{'' if unit_text == '%' else ' '}{unit_text}",
                bound,
            ),
            precision=max(_precision(low), _precision(high)),
            approximate=bool(_APPROXIMATE.search(before)),
            context=_clause(before),
        )
        # A list before it shares its unit: "10, 20 and 30 mg".
        head = match.start()
        listed: list[Quantity] = []
        listing = _LISTED_LAST
        while (item := listing.search(text[previous_end:head])) is not None and not _YEAR.fullmatch(
            item.group(1)
        ):
            head, listing = previous_end + item.start(), _LISTED_MORE
            listed.append(
                replace(
                    quantity,
                    low=_value(item.group(1)),
                    high=_value(item.group(1)),
                    text=f"{item.group(1)} {unit_text}",
                    precision=_precision(item.group(1)),
                )
            )
        yield from reversed(listed)
        yield quantity
        previous_end, previous = match.end(), quantity


def _bound(before: str) -> Bound:
    """Whether the text before a number makes it a bound: next to it, or earlier in its clause."""
    directions: tuple[tuple[re.Pattern[str], Bound, Bound], ...] = (
        (_UPPER_NEAR, "upper", "lower"),
        (_LOWER_NEAR, "lower", "upper"),
    )
    for near, bound, opposite in directions:
        found = near.search(before)
        if found is not None:
            # "Do not operate it above 40 °C", "must not exceed 16 bar": a maximum.
            negated = _NEGATION.search(" ".join(_clause(before[: found.start()]).split()[-4:]))
            return opposite if negated else bound
    words = _clause(before)
    # "min" after a number is minutes; before one, in the clause, it names a minimum.
    if _UPPER_WORD.search(words):
        return "upper"
    if _LOWER_WORD.search(words):
        return "lower"
    return "value"


def _clause(before: str) -> str:
    """The last words of the clause ``before`` ends, up to :data:`_ROLE_WINDOW_WORDS`."""
    return " ".join(_CLAUSE_BREAK.split(before)[-1].split()[-_ROLE_WINDOW_WORDS:])


def _reading(before: str, stated: str, bound: Bound) -> str:
    """How a quantity reads, with the comparison written next to it ("up to 16 bar", "not above 40 °C")."""
    if bound == "value":
        return stated
    upper = _UPPER_NEAR.search(before)
    near = upper or _LOWER_NEAR.search(before)
    if near is None:
        return stated
    negated = (bound == "upper") != (upper is not None)
    return f"{'not ' if negated else ''}{_spaced(near.group(0).strip())} {stated}"


# -- tables ----------------------------------------------------------------------------------------

_FIELD = re.compile(rf"(?:^|;)\s*(?P<key>[^:;\n]{{1,80}}?)\s*:\s*(?P<value>{_SIGN}(?:{_NUMBER}))\s*(?=;|$)")
_UNIT_FIELD = re.compile(r"(?:^|;)\s*(?:units?|uom)\s*:\s*(?P<unit>[^;\n]{1,20}?)\s*(?=;|$)", re.IGNORECASE)
_CELL_VALUE = re.compile(
    rf"^\s*(?P<near>[<>≤≥]=?|up to|max\.?|min\.?)?\s*(?P<low>{_SIGN}(?:{_NUMBER}))"
    rf"(?:\s?(?:-|\u2013|to)\s?(?P<high>{_SIGN}(?:{_NUMBER})))?\s*$",
    re.IGNORECASE,
)


def _header(label: str) -> tuple[Unit, Bound] | None:
    """The unit and bound a table header or field name gives its numbers: "Max pressure (bar)",
    "max_pressure_bar", "flow_l_min" (L/min), "Temperature [°C]"."""
    bracketed = re.search(r"[(\[]\s*([^()\[\]]{1,20}?)\s*[)\]]\s*$", label)
    words = re.split(r"[\s_]+", label.strip())
    unit: Unit | None = None
    named = label
    if bracketed:
        unit = _unit_of(bracketed.group(1))
        named = label[: bracketed.start()]
    elif len(words) >= 2:
        for take in (2, 1):
            tail = words[-take:]
            if len(words) <= take:
                continue
            written = "/".join(tail)
            unit = _header_unit(written)
            if unit is not None:
                named = " ".join(words[:-take])
                break
    if unit is None:
        return None
    return unit, _bound_named(named)


def _bound_named(named: str) -> Bound:
    """The bound a header's words give its numbers ("Max pressure", "lower limit"), else a value."""
    if _UPPER_WORD.search(named.replace("_", " ")):
        return "upper"
    if _LOWER_WORD.search(named.replace("_", " ")):
        return "lower"
    return "value"


def _header_unit(written: str) -> Unit | None:
    parts = written.split("/")
    head = _HEADER_UNITS.get(parts[0].lower())
    if head is None:
        return None
    if len(parts) == 1:
        return head
    per = _PER.get(parts[1]) or _PER.get(parts[1].lower())
    if per is None:
        return None
    return Unit(f"{head.symbol}/{per.symbol}", f"{head.dimension}/{per.dimension}", head.scale / per.scale)


def _fields(text: str) -> Iterator[Quantity]:
    """Numbers in "key: value" fields (as CSV rows are written) whose key names a unit, or of a row
    with a unit field ("lower limit: 3.5; upper limit: 5.1; unit: mmol/L", as reference ranges are
    tabled), whose other numbers are in that unit."""
    for line in text.splitlines():
        named = _UNIT_FIELD.search(line)
        row_unit = _unit_of(named.group("unit")) if named else None
        yield from _line_fields(line, row_unit)


def _line_fields(line: str, row_unit: Unit | None) -> Iterator[Quantity]:
    found: list[Quantity] = []
    for match in _FIELD.finditer(line):
        header = _header(match.group("key"))
        if header is None and row_unit is not None:
            header = row_unit, _bound_named(match.group("key"))
        if header is not None:
            unit, bound = header
            number = match.group("value")
            found.append(
                Quantity(
                    _value(number),
                    _value(number),
                    unit,
                    bound,
                    f"{number} {unit.symbol}",
                    _precision(number),
                    context=match.group("key").replace("_", " "),
                )
            )
    yield from found
    # A row's lower and upper limit of one kind are also the range between them: "The normal range
    # of potassium is 135 mmol/L" disagrees with "lower limit: 3.5; upper limit: 5.1; unit: mmol/L".
    lower = [q for q in found if q.bound == "lower"]
    upper = [q for q in found if q.bound == "upper"]
    if len(lower) == 1 and len(upper) == 1 and lower[0].unit.dimension == upper[0].unit.dimension:
        low, high = lower[0], upper[0]
        top = _converted(high.high, high.unit, low.unit)
        if low.low <= top:
            yield replace(
                low,
                high=top,
                bound="value",
                text=f"{low.text} to {high.text}",
                precision=max(low.precision, high.precision),
                context=f"{low.context} to {high.context}",
            )


def _table_rows(lines: Sequence[str]) -> Iterator[tuple[str, list[Quantity]]]:
    """Each data row of a Markdown table, with the quantities its bare cells state under their headers."""
    headers: list[tuple[Unit, Bound] | None] | None = None
    labels: list[str] = []
    for line in lines:
        if table_rule(line):
            continue
        cells = table_cells(line)
        if headers is None:
            headers, labels = [_header(c) for c in cells], cells
            continue
        found = _quantities_in(line)
        for cell, header, label in zip(cells, headers, labels, strict=False):
            value = _CELL_VALUE.match(cell)
            if header is None or value is None:
                continue
            unit, bound = header
            near = (value.group("near") or "").lower()
            if near in {"<", "<=", "≤", "up to", "max", "max."}:
                bound = "upper"
            elif near in {">", ">=", "≥", "min", "min."}:
                bound = "lower"
            low, high = value.group("low"), value.group("high") or value.group("low")
            found.append(
                Quantity(
                    _value(low),
                    _value(high),
                    unit,
                    bound,
                    f"{cell} {unit.symbol}",
                    max(_precision(low), _precision(high)),
                    context=label,
                )
            )
        yield line, found


def _scoped(text: str) -> list[tuple[str, list[Quantity]]]:
    """The passage's sentences and table rows, each with the quantities it states."""
    out: list[tuple[str, list[Quantity]]] = []
    lines = text.split("\n")
    prose: list[str] = []
    table: list[str] = []

    def flush() -> None:
        if prose:
            joined = "\n".join(prose)
            out.extend((joined[a:b], _quantities_in(joined[a:b])) for a, b in sentence_spans(joined))
            prose.clear()
        if table:
            out.extend(_table_rows(table))
            table.clear()

    for line in lines:
        if line.lstrip().startswith("|"):
            if prose:
                flush()
            table.append(line)
        else:
            if table:
                flush()
            prose.append(line)
    flush()
    return out


# -- bare figures ----------------------------------------------------------------------------------

FIGURE = Unit("", "figure", 1.0)
"""The unit of a bare figure: a number written without one ("the threshold is 0.25", "a ratio of 1.5")."""

_BARE = re.compile(
    rf"{_BEFORE}(?<![\w/\[#§])(?P<number>{_SIGN}(?:{_NUMBER}))(?![\w/^%°µμ\u00b2\u00b3]|[.,]\d|-[A-Za-z])"
)
# A number after one of these names what it numbers, not a value: "Figure 3", "page 17", "type 1".
_LABEL = re.compile(
    r"(?:\b(?:fig|figs|figure|figures|table|tables|page|pages|p|pp|section|sections|chapter|chapters|"
    r"step|steps|version|edition|item|items|line|lines|row|rows|column|columns|no|nos|number|numbers|"
    r"type|types|phase|grade|class|stage|stages)\.?)\s*$",
    re.IGNORECASE,
)


def labelled(before: str) -> bool:
    """Whether a number after ``before`` is what a label numbers ("Figure 3", "page 17", "type 1"), not a
    value (nor a year: citeline.answer.dates)."""
    return _LABEL.search(before) is not None


_P_VALUE = re.compile(r"\bp\s*(?:[<>=\u2264\u2265]=?|value\s+(?:of\s+)?)\s*$", re.IGNORECASE)
_REFERENCE = re.compile(r"\[[\d\s,;\u2013-]+\]")
_ANY_NUMBER = re.compile(_NUMBER)
_SIGNED_NUMBER = re.compile(rf"(?:(?<![^\s(\[=:;,/])[-\u2212])?(?:{_NUMBER})")
_GONE = "\x00"
_LISTED_BEFORE = re.compile(rf"{_BEFORE}(?:{_NUMBER})(?:,?\s+(?:and|or)\s+|,\s*|\s*/\s*)(?={_GONE})")


def figures(text: str) -> list[Quantity]:
    """The bare figures ``text`` states: numbers with no unit that are values, in order.

    Not figures: numbers of a quantity with a unit (:func:`quantities`), years, reference markers
    (``[12]``), what a label numbers ("Figure 3", "page 17", "type 1"), p-values, and numbers inside
    codes, fractions and ordinals ("HX-4000", "10/66", "2nd"). Numbers written as words are not read
    here: "one of the pumps" states no figure.
    """
    blanked = _REFERENCE.sub(lambda m: " " * len(m.group(0)), text)
    blanked = _QUANTITY.sub(lambda m: _GONE * len(m.group(0)), blanked)
    # A list before a quantity shares its unit ("23, 15, and 216 kD"): its numbers are no bare figures.
    while (listed := _LISTED_BEFORE.sub(lambda m: _GONE * len(m.group(0)), blanked)) != blanked:
        blanked = listed
    found: list[Quantity] = []
    previous_end = 0
    for match in _BARE.finditer(blanked):
        number = match.group("number")
        before = blanked[previous_end : match.start()]
        previous_end = match.end()
        if _YEAR.fullmatch(number) or _LABEL.search(before) or _P_VALUE.search(before):
            continue
        bound = _bound(before)
        found.append(
            Quantity(
                low=_value(number),
                high=_value(number),
                unit=FIGURE,
                bound=bound,
                text=_reading(before, number, bound),
                precision=_precision(number),
                approximate=bool(_APPROXIMATE.search(before)),
                context=_clause(before),
            )
        )
    return found


def _mentions(text: str, figure: Quantity) -> bool:
    """Whether ``text`` writes the number of ``figure`` anywhere, whatever it makes of it (in a
    quantity, a code, a label or a list)."""
    slack = figure.precision * (1 + 1e-6)
    for value, hyphen in _written_numbers(text):
        if abs(value - figure.high) <= slack:
            return True
        if figure.high < 0 and hyphen and abs(value + figure.high) <= slack:
            return True
    return False


@functools.lru_cache(maxsize=256)
def _written_numbers(text: str) -> tuple[tuple[float, bool], ...]:
    """Every number ``text`` writes, with whether a hyphen comes right before it; read once for a text
    that many claims (and the sentences of an answer) are checked against."""
    # With its sign, where one is written ("CI -0.013" holds -0.013, "a change of 0.5" not -0.5): a
    # minus after a space, a bracket or a separator is a sign, one between two numbers a range
    # ("10-20" holds 20).
    # A hyphen the claim read as a minus ("interleukin (IL)-23") is written the same way in the text.
    written = _numerals(text).replace(",", "")
    return tuple(
        (_value(match.group(0)), match.start() > 0 and written[match.start() - 1] in "-\u2212")
        for match in _SIGNED_NUMBER.finditer(written)
    )


def unstated(claimed: Iterable[Quantity], kinds: Collection[str], texts: Sequence[str]) -> list[Quantity]:
    """Of the quantities ``claimed`` (:func:`quantities` of a claim), those none of ``texts`` speaks of:
    of no kind in ``kinds`` (the kinds the texts state), their number written nowhere. (A text stating
    one of their kind otherwise is :func:`disagreement`'s to judge.) "The temperature can take up to
    230 V" against a passage on a nut that "exceeds 250 degrees F" states 230 V, which it does not."""
    return [q for q in claimed if q.dimension not in kinds and not any(_mentions(text, q) for text in texts)]


def identifiers(text: str) -> frozenset[str]:
    """The codes ``text`` names (``HX-4000``, ``XR200``), as upper-case letters and digits."""
    return frozenset(re.sub(r"[^A-Z0-9]", "", m.group(0).upper()) for m in _IDENTIFIER.finditer(text))


@dataclass(frozen=True)
class Disagreement:
    """A quantity of the claim, what the passage states of the same kind instead (``stated``), and
    those of them whose context is closest to the claim's (``named``, what the answer names)."""

    claimed: Quantity
    stated: tuple[Quantity, ...]
    named: tuple[Quantity, ...]

    def describe(self) -> str:
        """ "it states 10 bar, where the source states 16 bar" (up to three of the source's)."""
        seen: list[str] = []
        for q in self.named:
            if q.text not in seen:
                seen.append(q.text)
        listed = seen[:3]
        others = listed[0] if len(listed) == 1 else f"{', '.join(listed[:-1])} and {listed[-1]}"
        return f"it states {self.claimed.text}, where the source states {others}"


def disagreement(claim: str, passage: str) -> Disagreement | None:
    """The first quantity of ``claim`` that ``passage`` states otherwise, and what it states; None when
    the passage states every claimed quantity it speaks of consistently (see the module docstring)."""
    claimed = [*quantities(claim), *figures(claim)]
    if not claimed:
        return None
    segments = _scoped(passage)
    codes = identifiers(claim)
    if codes and any(identifiers(s) & codes for s, _ in segments):
        # A table's other rows, or sentences about another device, are not about this one.
        segments = [(s, qs) for s, qs in segments if identifiers(s) & codes or not identifiers(s)]
    stated = [q for s, qs in segments for q in (*qs, *figures(s))]
    for quantity in claimed:
        same = [q for q in stated if q.dimension == quantity.dimension]
        # The claim's figure stated anywhere, whatever the passage makes of it ("peak concentration of
        # 5 mg/L" for "reached 5 mg/L"), is never a disagreement. A bare figure must be written as the
        # claim writes it (a "0" is no rounded 0.25), in whatever the passage writes it (a quantity, a
        # code, a list): it says nothing of what it measures.
        if not same:
            continue
        if quantity.unit is FIGURE:
            if _mentions(passage, quantity):
                continue
        elif any(same_figure(quantity, q) for q in same):
            continue
        # Else compared with what the passage states as the claim does: a claimed value with its values
        # ("500 mg to 1 g", not "less than 50 kg" body weight), a claimed maximum with its maxima.
        if any(q.bound == quantity.bound for q in same):
            same = [q for q in same if q.bound == quantity.bound]
        # A bare value is borne out only by that figure written: one that merely lies within a range or
        # under a bound the passage states may be any other quantity's ("the value must lie between 0
        # and 2" says nothing of a threshold of 0.25).
        exact = quantity.unit is FIGURE and quantity.bound == "value"
        if exact or not any(consistent(quantity, q) for q in same):
            return Disagreement(claimed=quantity, stated=tuple(same), named=_closest(claim, same))
    return None


def _closest(claim: str, stated: Sequence[Quantity]) -> tuple[Quantity, ...]:
    """The stated quantities whose context shares the most words with the claim, to name them."""
    words = _words(claim)
    overlap = [len(words & _words(q.context)) for q in stated]
    best = max(overlap)
    return tuple(q for q, n in zip(stated, overlap, strict=True) if n == best)


def _words(text: str) -> frozenset[str]:
    return frozenset(w for w in re.findall(r"[a-z]{3,}", text.lower()) if w not in _COMMON)


def _slack(claimed: Quantity, stated: Quantity) -> float:
    """How far apart, in base units, two figures may be and still be one: the coarser one's rounding
    (5% and 4% differ, 30% and 29.6% do not), a tenth for an approximate one."""
    slack = max(claimed.precision * claimed.unit.scale, stated.precision * stated.unit.scale)
    if claimed.approximate or stated.approximate:
        magnitude = max(abs(claimed.base(claimed.high)), abs(stated.base(stated.high)))
        slack = max(slack, 0.1 * magnitude)
    return slack * (1 + 1e-6)  # conversions are not exact in binary


def same_figure(claimed: Quantity, stated: Quantity) -> bool:
    """Whether two quantities of one kind state the same figure (or range), bound or not."""
    if claimed.dimension != stated.dimension:
        return False
    slack = _slack(claimed, stated)
    return (
        abs(claimed.base(claimed.low) - stated.base(stated.low)) <= slack
        and abs(claimed.base(claimed.high) - stated.base(stated.high)) <= slack
    )


def consistent(claimed: Quantity, stated: Quantity) -> bool:
    """Whether two quantities of one kind can both hold: two bounds of one direction must be the same
    bound (a maximum of 10 bar is not a maximum of 16 bar); anything else must overlap."""
    if claimed.dimension != stated.dimension:
        return True
    slack = _slack(claimed, stated)
    if claimed.bound == stated.bound and claimed.bound != "value":
        return abs(claimed.base(claimed.high) - stated.base(stated.high)) <= slack
    c_low, c_high = claimed.interval()
    s_low, s_high = stated.interval()
    return c_low - slack <= s_high and s_low - slack <= c_high
