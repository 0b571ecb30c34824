"""Auto-metadata for chunks: the model numbers a chunk names and the kind of section it belongs to.

Both are rules, not a model, so every decision can be explained and repeated:

- **Model numbers** are product codes, found either after a word that announces one (``Model 5520A``,
  ``Model 737-8 and 737-9``, ``P/N 2274-COL-AC2-26``, ``Part No. 55-1234``) or on their own when
  their shape leaves little doubt: two to four capitals, an optional hyphen, three to five digits and
  an optional letter suffix (``XR-200``, ``KX-T7730``, ``DCS1200``). Anything else with a digit is
  left alone: dates, phone numbers, docket and document numbers (``FAA-2020-0686``), standards
  (``ISO-9001``, ``RS-232``), gene and protein names (``IL-10``), quantities (``220V``). They are
  stored as canonical keys, upper case letters and digits only (``XR-200`` is ``XR200``), so a
  filter matches however a document spelt them.
- **Section type** (:class:`SectionType`) comes from the chunk's heading when one names a kind of
  section (the loader's heading, else a heading-like line inside the chunk, as PDFs have), else from
  cue phrases in the text when at least two different ones agree and no other type has as many.
  :func:`classify_section` says which rule decided.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "Annotation",
    "SectionMatch",
    "SectionType",
    "annotate",
    "classify_section",
    "model_key",
    "model_numbers",
]


class SectionType(StrEnum):
    """The kinds of section a device manual (and much other technical writing) is made of."""

    SAFETY = "safety"
    INSTALLATION = "installation"
    OPERATION = "operation"
    MAINTENANCE = "maintenance"
    TROUBLESHOOTING = "troubleshooting"
    SPECIFICATIONS = "specifications"
    WARRANTY = "warranty"


# -- model numbers ---------------------------------------------------------------------------------

_DASH = "\\-\u2010\u2011\u2012\u2013"  # hyphen, Unicode hyphens, figure dash, en dash (PDFs use them all)
_CODE = rf"[A-Za-z0-9]+(?:[{_DASH}/]\n?[A-Za-z0-9]+)*"
#: A further code in a list after the word: a digit among its first characters, so that a list never
#: swallows the next words (", part no. 55-1234").
_MORE = rf"(?=[A-Za-z]{{0,4}}\d){_CODE}"
#: Words that announce a model or part number. "Part" alone is not one ("14 CFR Part 39"), nor is
#: "Type" ("type 2 diabetes") or "No." ("No. 07-1315", a docket).
_ANNOUNCED = re.compile(
    r"\b(?P<word>model(?:\s+(?:no\.?|number|#))?|part\s+(?:no\.?|number|#)|p/n|cat(?:alog|\.)?\s*(?:no\.?|number)"
    r"|sku)[)\]]?\s*(?P<sep>[:#])?\s*"
    rf"(?P<code>{_CODE})"
    rf"(?P<more>(?:\s*(?:,|&|\band\b|\bor\b)\s*{_MORE})*)",
    re.IGNORECASE,
)
_LISTED = re.compile(_MORE)
_EDGE_BEFORE = rf"(?<![\w{_DASH}/.])"
_EDGE_AFTER = rf"(?![\w{_DASH}/]|\.\d)"
#: Codes that stand alone: two to four capitals, a hyphen, digits and an optional letter suffix. With
#: two capitals, exactly three digits (XR-200), a letter before the digits (KX-T7730) or a letter
#: suffix (XR-20A): two capitals and four digits are as often a postcode (CH-6371). Without the hyphen
#: a code needs a word announcing it: alone, ET302 is a flight, HEK293 a cell line, AZD9291 a drug.
_SHAPED = re.compile(
    rf"{_EDGE_BEFORE}(?P<prefix>[A-Z]{{2,4}})[{_DASH}](?:"
    rf"(?<=[A-Z]{{3}}.)\d{{3,5}}[A-Z]{{0,3}}"
    rf"|\d{{3}}[A-Z]{{0,3}}"
    rf"|[A-Z]\d{{3,5}}[A-Z]{{0,3}}"
    rf"|\d{{2,5}}[A-Z]{{1,3}}"
    rf"){_EDGE_AFTER}"
)
#: Prefixes of codes with that shape that are not products: standards, interfaces, identifiers of
#: documents, regulations, trials and data sets, and biomedical names.
_NOT_PRODUCTS = frozenset(
    {
        "AC", "AD", "AES", "ANSI", "ASTM", "CAT", "CD", "CFR", "COX", "DIN", "DOI", "DSM", "EN", "ERR",
        "FAA", "FR", "FY", "GDS", "GPL", "GSE", "GSM", "HLA", "HR", "ICD", "IEC", "IEEE", "IL", "IP",
        "ISBN", "ISO", "ISSN", "MIL", "MMP", "NCT", "NFPA", "PL", "PMC", "PMID", "RFC", "RIN", "RS",
        "RSA", "SAE", "SHA", "SRA", "SRP", "SRR", "SRX", "TLR", "UL", "USC", "UTF",
    }
)  # fmt: skip


def model_key(code: str) -> str:
    """The canonical key of a model number: upper case letters and digits only (``xr-200`` -> ``XR200``)."""
    return re.sub(r"[^A-Z0-9]", "", code.upper())


def _announced_code(code: str) -> bool:
    """Whether a code after "Model" (or the like) is one: a digit, and three characters at least
    ("Model 2" in a paper is a regression model)."""
    key = model_key(code)
    return len(key) >= 3 and any(ch.isdigit() for ch in key)


def _announces(word: str, code: str, sep: str | None) -> bool:
    """Whether ``word`` announces ``code`` as a model number. A lower-case "model" is often a study's
    ("the MCF10A model", "a model HEK293 line"): after it, only a code starting with a digit or
    holding a hyphen counts, unless a colon makes it a field's label ("model: XR200", as a table's
    rows are written)."""
    if word != "model" or sep == ":":
        return True
    return code[0].isdigit() or any(ch in _DASH for ch in code)


def model_numbers(text: str) -> tuple[str, ...]:
    """The model numbers ``text`` names, as canonical keys (see :func:`model_key`), in order of first
    mention, each once."""
    found: dict[str, int] = {}  # key -> where it is first mentioned

    def add(code: str, at: int) -> None:
        key = model_key(code)
        found[key] = min(at, found.get(key, at))

    for match in _ANNOUNCED.finditer(text):
        first = match.group("code")
        if not _announced_code(first) or not _announces(match.group("word"), first, match.group("sep")):
            continue
        add(first, match.start("code"))
        # A list after the word ("Model 737-8 and 737-9") continues with codes of the same family:
        # sharing the first code's first two characters keeps "and 2019 models" out.
        for listed in _LISTED.finditer(match.group("more")):
            code = listed.group(0)
            if _announced_code(code) and model_key(code)[:2] == model_key(first)[:2]:
                add(code, match.start("more") + listed.start())
    for match in _SHAPED.finditer(text):
        if match.group("prefix") not in _NOT_PRODUCTS:
            add(match.group(0), match.start())
    return tuple(sorted(found, key=found.__getitem__))


# -- section types ---------------------------------------------------------------------------------

#: Heading words per type, in the order that decides a heading naming several ("Troubleshooting the
#: installation" is troubleshooting; "Safety during maintenance" is safety).
_HEADING_RULES: tuple[tuple[SectionType, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern, re.IGNORECASE))
    for kind, pattern in (
        (
            SectionType.TROUBLESHOOTING,
            r"\btrouble-?shoot\w*|\bfault[- ]finding|\bproblems?\s+(?:and|&)\s+solutions?|\bdiagnos\w+"
            r"|\b(?:error|fault)\s+codes?|\bwhat\s+to\s+do\s+if\b",
        ),
        (
            SectionType.SAFETY,
            r"\bsafety\b|\bwarnings?\b|\bcautions?\b|\bprecautions?\b|\bhazards?\b|\bsafeguards?\b",
        ),
        (
            SectionType.SPECIFICATIONS,
            r"\bspecifications?\b|\bspecs\b|\btechnical\s+(?:data|details|characteristics)\b|\bratings\b"
            r"|\bdimensions\b",
        ),
        (SectionType.WARRANTY, r"\bwarrant(?:y|ies)\b|\bguarantee\b"),
        (
            SectionType.INSTALLATION,
            r"\binstall\w*|\bset-?\s?up\b|\bmounting\b|\bunpacking\b|\bassembly\b|\bcommissioning\b"
            r"|\bwiring\b",
        ),
        (
            SectionType.MAINTENANCE,
            # "Care" alone is a clinician's word ("Palliative care", "Care plan", "Keeping one care
            # journey apart"): only a manual's care of a thing counts.
            r"\bmaint(?:enance|aining)\b|\bservicing\b|\bcleaning\b|\blubricat\w+"
            r"|\bcare\s+(?:and|&)\s+(?:maintenance|cleaning|storage|upkeep)\b|\bproduct\s+care\b"
            r"|\bcaring\s+for\s+(?:your|the)\b|\bcare\s+of\s+(?:your|the)\s+(?:unit|device|appliance|"
            r"product|instrument|machine|equipment|tool)s?\b"
            r"|\binspections?\b|\bcalibrat\w+|\breplacing\b",
        ),
        (
            SectionType.OPERATION,
            r"\boperati(?:on|ng)\b|\buser(?:'s)?\s+guide\b|\busing\s+(?:the|your)\b|\bhow\s+to\s+use\b"
            r"|\bgetting\s+started\b|\bquick\s+start\b|\bcontrols\b|\binstructions\s+for\s+use\b",
        ),
    )
)


def _cue(pattern: str) -> re.Pattern[str]:
    """A cue pattern (lower case, each alternative starting a word with ``\\b``), compiled to search
    lower-cased text without the leading ``\\b``: a pattern that starts with letters is searched for
    them directly, several times faster than with ``\\b`` or ``IGNORECASE``. :func:`_starts_a_word`
    checks the word start instead."""
    return re.compile(re.sub(r"(^|\|)\\b", r"\1", pattern))


def _starts_a_word(pattern: re.Pattern[str], lowered: str) -> bool:
    for match in pattern.finditer(lowered):
        at = match.start()
        if at == 0 or not (lowered[at - 1].isalnum() or lowered[at - 1] == "_"):
            return True
    return False


#: Cues in running text, by type: a name (what an explanation shows) and its pattern. A type is decided
#: by how many different cues it has, not how often one repeats ("symptom" alone is a medical word).
_TEXT_CUES: dict[SectionType, tuple[tuple[str, re.Pattern[str]], ...]] = {
    kind: tuple((name, _cue(pattern)) for name, pattern in cues)
    for kind, cues in (
        (
            SectionType.TROUBLESHOOTING,
            (
                ("troubleshooting", r"\btrouble-?shoot\w*"),
                ("possible cause", r"\b(?:possible|probable|likely)\s+causes?\b"),
                ("remedy", r"\bremed(?:y|ies)\b|\bcorrective\s+actions?\b|\bsolutions?:"),
                ("error code", r"\b(?:error|fault)\s+(?:codes?|messages?)\b"),
                (
                    "does not work",
                    r"\b(?:does|do|will)\s+not\s+(?:start|work|turn\s+on|power\s+on|run|respond)\b"
                    r"|\bfails?\s+to\s+(?:start|operate|power\s+on)\b",
                ),
                ("reset", r"\breset\s+the\s+(?:unit|device|breaker|system|controller)\b"),
            ),
        ),
        (
            SectionType.SAFETY,
            (
                ("risk of", r"\brisk\s+of\s+(?:electric\s+shock|fire|injury|death|explosion|burns?)\b"),
                ("injury", r"\b(?:serious|personal|bodily)\s+injury\b"),
                ("protective equipment", r"\bprotective\s+(?:equipment|gloves|eyewear|glasses|clothing)\b"),
                (
                    "disconnect power",
                    r"\b(?:disconnect|unplug|switch\s+off)\s+(?:the\s+)?(?:power|mains|unit)\b",
                ),
                ("electric shock", r"\belectric(?:al)?\s+shock\b"),
                ("safety instructions", r"\bsafety\s+(?:instructions|precautions|information)\b"),
            ),
        ),
        (
            SectionType.SPECIFICATIONS,
            (
                ("rating", r"\brated\s+(?:voltage|power|current|capacity|speed|output)\b"),
                ("operating temperature", r"\boperating\s+(?:temperature|humidity|pressure)\b"),
                ("dimensions", r"\bdimensions\b"),
                ("weight", r"\b(?:net|gross|shipping)\s+weight\b|\bweight\s*:"),
                ("power supply", r"\bpower\s+(?:supply|consumption|rating)\b"),
            ),
        ),
        (
            SectionType.INSTALLATION,
            (
                ("install", r"\binstall(?:ing|ed|ation)?\b"),
                ("unpack", r"\bunpack\w*"),
                ("mount", r"\bmount(?:ing)?\s+(?:the|bracket|screws|plate)\b"),
                ("connect", r"\bconnect\s+the\s+(?:power|cable|cord|hose|pipe|wires?|supply)\b"),
                ("anchor", r"\b(?:wall|floor)\s+anchors?\b"),
                ("level", r"\blevel\s+the\s+(?:unit|machine|appliance)\b"),
            ),
        ),
        (
            SectionType.MAINTENANCE,
            (
                ("clean", r"\bclean(?:ing)?\s+the\b"),
                ("lubricate", r"\blubricat\w+"),
                (
                    "replace part",
                    r"\breplac(?:e|ing)\s+the\s+(?:filter|battery|belt|fuse|lamp|seal|gasket|brushes)\b",
                ),
                ("inspect", r"\binspect(?:ion|ed|ing)?\b"),
                (
                    "interval",
                    r"\bevery\s+\d+\s+(?:operating\s+hours|hours\s+of\s+operation|cycles)\b"
                    r"|\bservice\s+intervals?\b",
                ),
                ("maintenance", r"\bmaintenance\b"),
            ),
        ),
        (
            SectionType.OPERATION,
            (
                ("press", r"\bpress\s+(?:the|and\s+hold)\b"),
                ("turn control", r"\bturn\s+the\s+(?:knob|dial|switch)\b"),
                ("button", r"\bbuttons?\b"),
                ("display", r"\b(?:the\s+)?display\s+(?:shows|reads|flashes)\b"),
                ("start or stop", r"\bto\s+(?:start|stop)\s+the\s+(?:unit|machine|device|cycle|program)\b"),
                ("mode", r"\bmode\b"),
            ),
        ),
        (
            SectionType.WARRANTY,
            (
                ("warranty", r"\bwarrant(?:y|ies|ed)\b"),
                ("proof of purchase", r"\bproof\s+of\s+purchase\b"),
                ("guarantee", r"\bguarantee\w*"),
                ("not covered", r"\bnot\s+covered\b"),
            ),
        ),
    )
}
#: Capitalised warnings are a safety cue only in capitals ("CAUTION", not "with caution").
_SHOUTED = re.compile(r"\b(?:WARNING|CAUTION|DANGER)\b")
#: Quantities in units a specification gives; three different units make one specifications cue.
_UNITS = re.compile(r"\b\d+(?:[.,]\d+)?\s?(V|VAC|VDC|Hz|kW|W|mA|A|mm|cm|kg|lbs?|psi|bar|dB|rpm)\b")
_MIN_UNITS = 3
#: Distinct cue phrases needed before running text decides a type.
MIN_CUES = 2
#: A heading-like line inside a chunk: short, no closing punctuation.
_MAX_HEADING_CHARS = 70
_MAX_HEADING_WORDS = 9


@dataclass(frozen=True)
class SectionMatch:
    """A section type and the rule that chose it, in words."""

    type: SectionType
    reason: str


def _heading_type(heading: str) -> tuple[SectionType, str] | None:
    for kind, pattern in _HEADING_RULES:
        found = pattern.search(heading)
        if found:
            return kind, found.group(0)
    return None


def _heading_lines(text: str) -> list[str]:
    """Lines of ``text`` that read as headings: Markdown headings, and lines that are short,
    capitalised, without closing punctuation, and first in the chunk or after a line that ended a
    sentence (a wrapped line of prose follows one that did not)."""
    out: list[str] = []
    previous = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#"):  # a Markdown heading the chunk runs into
            out.append(line.lstrip("#").strip())
            previous = line
            continue
        words = line.split()
        starts_block = not previous or previous[-1] in ".:!?"
        if (
            line
            and starts_block
            and len(line) <= _MAX_HEADING_CHARS
            and len(words) <= _MAX_HEADING_WORDS
            and line[-1] not in ".,;:"
            and (line[0].isupper() or line[0].isdigit() or line[0] == "(")
            and all(w[0].isupper() or not w[0].isalpha() for w in words if len(w) >= 4)
        ):
            out.append(line)
        previous = line
    return out


def classify_section(heading: str | None, text: str) -> SectionMatch | None:
    """The section type of a chunk with heading ``heading`` (the loader's, may be None) and ``text``.

    The loader's heading decides when it names a type; else the first heading-like line in the text
    that names one; else the cue phrases in the text, when at least :data:`MIN_CUES` different ones
    point to one type and no other type has as many. None when no rule decides.
    """
    if heading:
        named = _heading_type(heading)
        if named:
            return SectionMatch(named[0], f"heading {heading!r} says {named[1]!r}")
    for line in _heading_lines(text):
        named = _heading_type(line)
        if named:
            return SectionMatch(named[0], f"heading-like line {line!r} says {named[1]!r}")
    cues: dict[SectionType, set[str]] = {}
    lowered = text.lower()
    for kind, kind_cues in _TEXT_CUES.items():
        found = {name for name, pattern in kind_cues if _starts_a_word(pattern, lowered)}
        if found:
            cues[kind] = found
    if _SHOUTED.search(text):
        cues.setdefault(SectionType.SAFETY, set()).add("WARNING/CAUTION/DANGER")
    units = sorted({m.group(1) for m in _UNITS.finditer(text)})
    if len(units) >= _MIN_UNITS:
        cues.setdefault(SectionType.SPECIFICATIONS, set()).add(f"quantities in {', '.join(units)}")
    ranked = sorted(cues.items(), key=lambda item: -len(item[1]))
    if not ranked or len(ranked[0][1]) < MIN_CUES:
        return None
    if len(ranked) > 1 and len(ranked[1][1]) == len(ranked[0][1]):
        return None
    kind, phrases = ranked[0]
    return SectionMatch(kind, f"text has {len(phrases)} {kind.value} cues: {', '.join(sorted(phrases))}")


@dataclass(frozen=True)
class Annotation:
    """A chunk's auto-metadata."""

    model_numbers: tuple[str, ...]
    section: SectionMatch | None

    @property
    def section_type(self) -> str | None:
        return self.section.type.value if self.section else None


def annotate(heading: str | None, text: str) -> Annotation:
    """The auto-metadata of a chunk: its model numbers and its section type (see the module's rules)."""
    return Annotation(model_numbers(text), classify_section(heading, text))
