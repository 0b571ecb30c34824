"""Keyword analysis: technical terms stay whole, ordinary words are stemmed, stop words dropped."""

from citeline.store.analyzer import Analyzer


def test_acronyms_and_hyphenated_terms_are_kept_unstemmed_with_their_parts() -> None:
    terms = Analyzer().terms("LDL-C was lower in FH patients with a high BMI")
    assert "ldl-c" in terms and "fh" in terms and "bmi" in terms
    assert "ldl" in terms  # the parts too, so "LDL cholesterol" still matches
    assert "patient" in terms and "was" not in terms and "in" not in terms


def test_each_step_can_be_switched_off() -> None:
    text = "The Running Studies"
    assert Analyzer(stem=False, stop_words=False).terms(text) == ["the", "running", "studies"]
    assert Analyzer(lowercase=False, stem=False).terms(text) == ["Running", "Studies"]
    assert Analyzer(extra_stop_words=frozenset({"studies"}), stem=False).terms(text) == ["running"]


def test_possessives_are_dropped() -> None:
    assert Analyzer().terms("the patient's chart") == ["patient", "chart"]
