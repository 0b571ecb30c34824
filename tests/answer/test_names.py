"""Names a cited sentence gives that its passage does not (citeline.answer.names)."""

from __future__ import annotations

from citeline.answer.names import codes, names, unnamed

BOEING = (
    "The FAA amends § 39.13 by adding the following new AD: The Boeing Company: Docket No. FAA-2020-0686. "
    "(c) Applicability. This AD applies to The Boeing Company Model 737-8 and 737-9 airplanes. (e) "
    "Unsafe Condition. This AD was prompted by a single erroneously high angle of attack (AOA) sensor "
    "input. For more information contact the Seattle ACO Branch; email: 9-FAA-SACO-AD-Inquiry@faa.gov."
)


def test_a_name_is_a_word_capitalised_after_the_first_or_with_a_capital_inside() -> None:
    assert names("The directive applies to Pilatus Aircraft Ltd.") == ["Pilatus", "Aircraft", "Ltd"]
    assert names("Boeing builds it; the HNSW index and McDonald's too.") == ["HNSW", "McDonald's"]
    assert names("Nothing here is named.") == []


def test_units_letters_and_capitalised_stop_words_are_no_names() -> None:
    # "kW" and "MHz" are compared as quantities (citeline.answer.quantities); "V" is one letter.
    assert names("The motor takes 230 V at 0.75 kW and 50 MHz: The rest is said later.") == []


def test_a_name_the_passage_never_gives_is_unnamed() -> None:
    # The packaged model's answer on the Federal Register fixture: Pilatus was in another passage.
    sentence = "The proposed airworthiness directive applies to Pilatus Aircraft Ltd."
    assert unnamed(sentence, BOEING) == ["Pilatus", "Aircraft", "Ltd"]
    assert unnamed("The directive applies to The Boeing Company Model 737-8 airplanes.", BOEING) == []


def test_a_name_is_borne_out_by_what_the_passage_is_read_under_or_what_was_asked() -> None:
    sentence = "Change the water filter of the Lavazza Blue every two months."
    passage = "Change the water filter every two months, or after 50 litres."
    assert unnamed(sentence, passage) == ["Lavazza", "Blue"]
    assert unnamed(sentence, passage, context=["Lavazza BLUE LB 1100 manual"]) == []
    assert unnamed(sentence, passage, context=["How often is the Lavazza Blue's filter changed?"]) == []


def test_an_acronym_is_borne_out_by_the_words_it_abbreviates_and_a_joined_name_by_its_parts() -> None:
    assert unnamed("The AOA sensor input prompted it, says the FAA.", BOEING) == []
    assert unnamed("Write to FAA-SACO-AD-Inquiry at faa.gov.", BOEING) == []
    assert unnamed("The NTSB prompted it.", BOEING) == ["NTSB"]


def test_a_code_is_borne_out_where_a_text_writes_it_whatever_its_dashes() -> None:
    # The packaged model cited "Service Bulletin 737-31-1860, dated 2007" to the directive's
    # "Service Bulletin 737-27-1318, dated June 24, 2020".
    bulletin = "as identified in Service Bulletin 737\u201327\u20131318, dated June 24, 2020."
    assert unnamed("It is Service Bulletin 737\u201331\u20131860.", bulletin) == ["737\u201331\u20131860"]
    assert unnamed("It is Service Bulletin 737-27-1318.", bulletin) == []
    assert unnamed("The XR-200 is rated 16 bar.", "XR200: maximum pressure 16 bar.") == []


def test_codes_are_parts_and_document_numbers_not_ranges_or_quantities() -> None:
    assert codes("Bulletin 737-31-1860 for the HX-4000, XR200 and M10 bolts; COVID-19") == [
        "737-31-1860",
        "HX-4000",
        "XR200",
        "M10",
        "COVID-19",
    ]
    assert codes("Give 10mg for 3-5 days at 5kW.") == []


def test_a_quantity_of_a_kind_the_passage_never_states_is_not_borne_out() -> None:
    # Attributed by citeline itself: "The temperature can take up to 230 V." to the passage below.
    nut = "Self-locking nuts must not be used where the temperature exceeds 250 degrees F."
    assert unnamed("The temperature can take up to 230 V.", nut) == ["up to 230 V"]
    assert unnamed("The nut can take up to 250 °F.", nut) == []
    # One of its kind stated otherwise is the disagreement check's (citeline.answer.quantities).
    assert unnamed("The nut can take up to 300 °F.", nut) == []
