"""Auto-metadata: model numbers and section types, on real fixture text and on a device manual."""

from __future__ import annotations

import functools

import pytest

from citeline.annotate import SectionType, annotate, classify_section, model_key, model_numbers
from citeline.load import load
from citeline.split import split
from tests.conftest import PDFS

#: A device manual as its pages read, with the headings a manual has.
MANUAL = """# XR-200 Dehumidifier

## Important safety instructions

WARNING: risk of electric shock. Unplug the unit before opening the case and wear protective gloves.

## Installation

Unpack the unit, place it on a level floor and connect the power cord to a grounded outlet.

## Troubleshooting

If the XR-200 does not start, check the fuse. Error code E4 means the tank is full.
The Model 5520A controller reports error code E7 when its humidity sensor fails.

## Cleaning and care

Clean the filter every month and replace the filter every 500 operating hours.

## Specifications

Rated voltage 220 V, 50 Hz, power consumption 300 W, net weight 12 kg.

## Warranty

The warranty covers parts for two years; keep your proof of purchase.
"""


@functools.cache
def fixture_text(name: str) -> str:
    return "\n".join(page.text for page in load(PDFS / name).pages)


# -- model numbers -------------------------------------------------------------------------------


def test_model_numbers_in_the_federal_register_airworthiness_directive() -> None:
    found = set(model_numbers(fixture_text("multicol_federal_register_2020-17221.pdf")))
    # "The Boeing Company Model 737-8 and 737-9 (737 MAX) airplanes", "Boeing Model 737 airplanes",
    # "part number (P/N) 2274-COL-AC2-26", "Pilatus Aircraft Ltd. Model PC-12/47E airplanes".
    assert {"7378", "7379", "737", "2274COLAC226", "PC1247E"} <= found
    # What else has digits there is not a model number: docket FAA-2020-0686, product identifier
    # 2019-NM-035-AD, RIN 2120-AA64, AD 2018-23-51, service bulletins 737-31-1860, fax 202-493-2251,
    # room W12-140, mail code MC 110-SK57, ZIP 90740-5600, postcode CH-6371, software P12.1.2,
    # typesetting codes (Fmt 4702, Jkt 250001, 06AUP1, DSKJLSW7X2PROD, EP06AU20.015), flight 610.
    for not_a_model in (
        "FAA20200686", "2019NM035AD", "NM035", "2120AA64", "AA64", "20182351", "737311860", "2024931",
        "W12140", "SK57", "110SK57", "907405600", "CH6371", "P1212", "4702", "250001", "06AUP1",
        "DSKJLSW7X2PROD", "EP06AU20", "610",
    ):  # fmt: skip
        assert not_a_model not in found, not_a_model
    # A flight number written like a model number ("ET-302" next to registration ET-AVJ): shape
    # alone cannot tell them apart.
    assert found - {"7378", "7379", "737", "2274COLAC226", "PC1247E"} == {"ET302"}


@pytest.mark.parametrize(
    "name",
    [
        "manual_faa_amt_handbook_sample.pdf",  # Figure 7-26, No. 6, 7-45
        "odd_scotus_transcript_p1.pdf",  # docket No. 07-1315, 1:01 p.m.
        "odd_nics_rotated_table.pdf",  # a table of counts
        "multicol_latex_pypdf_sample.pdf",  # 2024, km2
    ],
)
def test_documents_without_model_numbers_have_none(name: str) -> None:
    assert model_numbers(fixture_text(name)) == ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Hold RESET on the XR-200 for five seconds.", ("XR200",)),
        ("The Model 5520A controller", ("5520A",)),
        ("model 737-8 and 737-\n9 airplanes", ("7378", "7379")),
        ("fits the KX-T7730 and the XR-20A", ("KXT7730", "XR20A")),
        ("Model DCS1200, part no. 55-1234", ("DCS1200", "551234")),
        ("Model XR-200 and 2019 units", ("XR200",)),  # a list continues only within the family
        ("model: XR200, flow: 40 l/min", ("XR200",)),  # a table row's field, lower case
    ],
)
def test_model_numbers_are_found_in_their_usual_forms(text: str, expected: tuple[str, ...]) -> None:
    assert model_numbers(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "Model 2 adjusted for age",  # a regression model
        "the MCF10A model of breast tissue",  # a cell line before "model"
        "IL-10 and COVID-19 in HEK293 cells treated with AZD9291",  # biomedical names and codes
        "certified to ISO-9001; RS-232 port; 220V, 50Hz, 1200W",  # standards, interfaces, quantities
        "flight ET302 landed; P.O. Box 992, CH-6371 Stans",  # flights and postcodes
        "14 CFR Part 39, Part 121 operations, type 2 diabetes",  # "part" and "type" announce nothing
    ],
)
def test_tokens_with_digits_that_are_not_model_numbers(text: str) -> None:
    assert model_numbers(text) == ()


def test_model_keys_ignore_case_and_separators() -> None:
    assert model_key("xr-200") == model_key("XR 200") == model_key("XR\u2013200") == "XR200"


# -- section types ---------------------------------------------------------------------------------


def _manual_sections() -> list[tuple[str, str]]:
    """The manual's sections as (heading, text) pairs."""
    parts = MANUAL.split("\n## ")[1:]
    return [(part.split("\n", 1)[0], part.split("\n", 1)[1].strip()) for part in parts]


def test_each_section_of_a_manual_gets_its_type_from_its_heading() -> None:
    types = {heading: classify_section(heading, text) for heading, text in _manual_sections()}
    assert {heading: match.type if match else None for heading, match in types.items()} == {
        "Important safety instructions": SectionType.SAFETY,
        "Installation": SectionType.INSTALLATION,
        "Troubleshooting": SectionType.TROUBLESHOOTING,
        "Cleaning and care": SectionType.MAINTENANCE,
        "Specifications": SectionType.SPECIFICATIONS,
        "Warranty": SectionType.WARRANTY,
    }


def test_without_headings_the_text_of_each_section_decides() -> None:
    types = {heading: classify_section(None, text) for heading, text in _manual_sections()}
    assert {heading: match.type if match else None for heading, match in types.items()} == {
        "Important safety instructions": SectionType.SAFETY,
        "Installation": SectionType.INSTALLATION,
        "Troubleshooting": SectionType.TROUBLESHOOTING,
        "Cleaning and care": SectionType.MAINTENANCE,
        "Specifications": SectionType.SPECIFICATIONS,
        "Warranty": SectionType.WARRANTY,
    }


def test_care_of_a_patient_is_no_maintenance_section_but_care_of_a_device_is() -> None:
    clinical = [
        "Keeping one care journey apart from another",
        "Palliative care",
        "Care plan",
        "Intensive care",
        "Standards of care",
    ]
    assert {h: classify_section(h, "Text.") for h in clinical} == dict.fromkeys(clinical)
    for heading in ("Care and storage", "Product care", "Caring for your dishwasher", "Care of the unit"):
        match = classify_section(heading, "Text.")
        assert match is not None and match.type is SectionType.MAINTENANCE, heading


def test_a_section_type_says_which_rule_chose_it() -> None:
    by_heading = classify_section("Troubleshooting the installation", "Check the fuse.")
    assert by_heading is not None and by_heading.type is SectionType.TROUBLESHOOTING
    assert by_heading.reason == "heading 'Troubleshooting the installation' says 'Troubleshooting'"
    in_text = classify_section(None, "Previous paragraph ends here.\nTROUBLESHOOTING\nCheck the fuse.")
    assert in_text is not None and in_text.reason.startswith("heading-like line 'TROUBLESHOOTING'")
    by_cues = classify_section(None, "Possible cause: a blown fuse. Remedy: replace it. Error code E4.")
    assert by_cues is not None and by_cues.type is SectionType.TROUBLESHOOTING
    assert by_cues.reason == "text has 3 troubleshooting cues: error code, possible cause, remedy"


def test_running_text_decides_only_with_two_different_cues_and_no_tie() -> None:
    assert classify_section(None, "Patients reported symptoms; the remedy was rest.") is None
    assert classify_section(None, "Press the lid. Install the unit.") is None  # one cue each
    assert classify_section(None, "Results: 2.3 mm and 4.5 mm apart, 70 kg") is None  # two units only


def test_headings_of_the_federal_register_directive_and_plain_prose() -> None:
    pages = list(load(PDFS / "multicol_federal_register_2020-17221.pdf").pages)
    typed = {
        match.reason
        for d in split(pages, chunk_size=800, chunk_overlap=120)
        if (match := classify_section(d.section, d.text)) is not None
    }
    # The PDF's bold heading is the chunks' section now (1fae79a), not a heading-like line of their text.
    heading = "(j) Installation/Verification of MAX Display System (MDS) Software, Removal of INOP Markers"
    assert f"heading '{heading}' says 'Installation'" in typed
    handbook = list(load(PDFS / "manual_faa_amt_handbook_sample.pdf").pages)
    chunks = split(handbook, chunk_size=800, chunk_overlap=0)
    assert all(classify_section(d.section, d.text) is None for d in chunks)


def test_annotate_gives_both() -> None:
    found = annotate("Troubleshooting", "If the XR-200 does not start, check the fuse.")
    assert found.model_numbers == ("XR200",) and found.section_type == "troubleshooting"
