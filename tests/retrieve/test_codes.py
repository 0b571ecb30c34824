"""A query that is a code finds the passage that writes it, ahead of passages that only look alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from citeline.engine import Citeline
from citeline.store.analyzer import Analyzer
from tests.conftest import write

#: Parts lists of a repair manual: to the vector of a code, they look more like it than prose that
#: writes it does (similarity 0.40 to 0.46 against 0.22).
_PARTS = [
    f"Parts list {n}: "
    + ", ".join(f"{5000 + 37 * n + k}-{1000 + 53 * k + n}-{(n * k) % 90 + 10}" for k in range(8))
    for n in range(1, 40)
]
_BULLETIN = (
    "Service bulletin. Units shipped in the spring carry a revised seal; owners of earlier units need not "
    "act before their next scheduled service, when the technician will fit kit 4471-0932-11 and check "
    "the pump for leaks, noise and vibration. Keep this bulletin with the owner's manual."
)


def test_only_codes_reads_a_query_of_codes_with_or_without_stop_words_and_lookup_words() -> None:
    analyzer = Analyzer()

    assert analyzer.only_codes("737-31-1860")
    assert analyzer.only_codes("What is rs11614913?")
    assert analyzer.only_codes("E4021 P446L")
    # As PDFs print them, with en-dashes (the trial's "737\u201331\u20131860" was read as words).
    assert analyzer.only_codes("737\u201331\u20131860")
    assert analyzer.only_codes("What is FAA\u20132020\u20130686?")
    # The words a lookup is asked with: what kind of code, what is asked of it.
    assert analyzer.only_codes("What does E4021 mean?")
    assert analyzer.only_codes("error code E4021")
    assert analyzer.only_codes("What does part number 737-31-1860 stand for?")
    # A word that says more than the code, an acronym without a digit, plain words: a query in words.
    assert not analyzer.only_codes("E4021 overheating")
    assert not analyzer.only_codes("What does the error mean?")
    assert not analyzer.only_codes("AMPK")
    assert not analyzer.only_codes("pump seal")
    assert not analyzer.only_codes("What is it?")


def test_a_code_asked_alone_ranks_the_one_passage_that_writes_it_first(cl: Citeline, tmp_path: Path) -> None:
    # Ranked last of 40 when the lone keyword match weighed a third of the dense list's flat ranking.
    parts = [write(tmp_path / f"parts-{n}.txt", text) for n, text in enumerate(_PARTS)]
    cl.ingest([*parts, write(tmp_path / "bulletin.txt", _BULLETIN)])

    for query in ("4471-0932-11", "What is 4471-0932-11?"):
        hits = cl.search(query)
        assert "4471-0932-11" in hits[0].text, query


#: A code list as a clinic keeps one: the codes printed with their points, rows alike but for the code.
_CODES = "\n".join(
    f"{code}: {name}."
    for code, name in [
        ("E11.9", "Type 2 diabetes mellitus without complications"),
        ("E11.65", "Type 2 diabetes mellitus with hyperglycemia"),
        ("E11.649", "Type 2 diabetes mellitus with hypoglycemia without coma"),
        ("E10.65", "Type 1 diabetes mellitus with hyperglycemia"),
        ("E55.9", "Vitamin D deficiency, unspecified"),
    ]
)


@pytest.mark.parametrize("keyword_index", ["sql", "memory"])
def test_a_code_typed_without_its_separators_finds_the_passage_that_prints_them(
    cl: Citeline, tmp_path: Path, keyword_index: str
) -> None:
    parts = [write(tmp_path / f"parts-{n}.txt", text) for n, text in enumerate(_PARTS)]
    cl.ingest([*parts, write(tmp_path / "bulletin.txt", _BULLETIN), write(tmp_path / "codes.txt", _CODES)])
    derived = cl.derive(keyword_index=keyword_index)
    try:
        # Typed as a keyboard allows, the codes were other terms than the printed ones: no keyword match,
        # and the dense list put the parts lists first.
        for query, printed in [
            ("E1165", "E11.65"),
            ("What does E1165 mean?", "E11.65"),
            ("4471093211", "4471-0932-11"),
            ("What is 4471093211?", "4471-0932-11"),
        ]:
            hits = derived.search(query)
            assert printed in hits[0].text, query
        # Printed with its separators in the question, squashed in the document.
        note = "Replacement seal kit 7731209 fits every unit built before May."
        derived.ingest([write(tmp_path / "note.txt", note)])
        assert "7731209" in derived.search("seal kit 773-12-09")[0].text
    finally:
        derived.close()


def test_a_number_is_not_a_code_written_with_a_decimal_point() -> None:
    analyzer = Analyzer()
    # 1.5 mg is not 15 mg: a decimal point is no separator to squash.
    assert "15mg" not in analyzer.query_terms("take 1.5mg daily")
    assert "e1165" in analyzer.query_terms("What does E11.65 mean?")
    assert analyzer.unjoined_codes("What does E1165 mean? And 2019?") == ["e1165"]
    # A long number asked alone is a lookup of it; a year or a number among words is not.
    assert analyzer.only_codes("4471093211")
    assert not analyzer.only_codes("2019")
    assert not analyzer.only_codes("patients in 2019")
