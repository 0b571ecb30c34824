"""Keyword analysis: technical terms stay whole, ordinary words are stemmed, stop words dropped."""

from collections import Counter
from pathlib import Path

import pytest

from citeline.engine import Citeline
from citeline.errors import ConfigError
from citeline.settings import Settings
from citeline.split import split
from citeline.store import analyzer as analyzer_module
from citeline.store.analyzer import MAX_TERM_CHARS, Analyzer, DocumentTerms
from citeline.types import Page
from tests.conftest import write


def test_acronyms_and_hyphenated_terms_are_kept_unstemmed_with_their_parts() -> None:
    terms = Analyzer().terms("LDL-C was lower in FH patients with a high BMI")
    assert "ldl-c" in terms and "fh" in terms and "bmi" in terms
    assert "ldl" in terms  # the parts too, so "LDL cholesterol" still matches
    assert "patient" in terms and "was" not in terms and "in" not in terms


def test_a_query_also_looks_for_neighbouring_words_written_together() -> None:
    # "back up" must find "backup": alone, "up" is a stop word and "back" is another word.
    analyzer = Analyzer()

    assert analyzer.query_terms("How do I back up the index?")["backup"] == 1
    assert {"login", "setup", "overexpress"} <= set(analyzer.query_terms("log in; set up; over expression"))
    # What the words give on their own stays as it was, and no joined term repeats one of them.
    assert analyzer.query_terms("back up") == Counter({"back": 1, "backup": 1})


def test_a_query_joins_no_two_stop_words_no_words_split_by_punctuation_and_makes_no_stop_word() -> None:
    analyzer = Analyzer()

    assert "doi" not in analyzer.query_terms("How do I cite it?")  # "do I" is not a DOI
    assert "int" not in analyzer.query_terms("perturbations in T cells")  # nor "in T" an "int"
    assert "email" in analyzer.query_terms("send an e mail")  # two words that are no stop words join
    assert "backup" not in analyzer.query_terms("Look back, up the hill")
    assert "himself" not in analyzer.query_terms("him self")  # a stop word, never a term
    # Documents are indexed word by word, as before.
    assert "backup" not in analyzer.terms("back up")


def test_each_step_can_be_switched_off() -> None:
    text = "The Running Studies"
    assert Analyzer(stem=False, stop_words=False).terms(text) == ["the", "running", "studies"]
    assert Analyzer(lowercase=False, stem=False).terms(text) == ["Running", "Studies"]
    assert Analyzer(extra_stop_words=frozenset({"studies"}), stem=False).terms(text) == ["running"]


def test_possessives_are_dropped() -> None:
    assert Analyzer().terms("the patient's chart") == ["patient", "chart"]


def test_domain_stop_words_come_from_the_settings() -> None:
    settings = Settings(keyword_extra_stop_words=["Patient", "study"])
    assert Analyzer.from_settings(settings).terms("Patients in the study had FH") == ["fh"]


def test_an_unknown_stemmer_language_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="klingon"):
        Analyzer.from_settings(Settings(keyword_language="klingon"))


def test_a_namespace_keeps_the_analyzer_it_was_indexed_with(settings: Settings, tmp_path: Path) -> None:
    with Citeline(settings) as cl:
        cl.ingest([write(tmp_path / "a.md", "# Pumps\n\nPrime the pumps before running them.\n")])
    unstemmed = settings.model_copy(update={"keyword_stem": False})
    with pytest.raises(ConfigError, match="stem"), Citeline(unstemmed) as cl:
        cl.search("pumps")
    with Citeline(settings) as cl:  # the settings it was built with still work
        assert "Prime the pumps" in cl.search("pump")[0].text


def test_an_empty_namespace_takes_a_new_analyzer(settings: Settings) -> None:
    with Citeline(settings) as cl:
        cl.stats()
    with Citeline(settings.model_copy(update={"keyword_stem": False})) as cl:
        assert cl.stats()["chunks"] == 0


@pytest.mark.parametrize(("size", "overlap"), [(60, 0), (60, 25), (23, 11), (90, 40)])
def test_document_terms_from_overlapping_chunks_are_those_of_the_whole_text(size: int, overlap: int) -> None:
    pages = [
        Page(
            1,
            "Statins lower LDL-C in FH patients.\n\nHigh LDL-C raises cardiovascular risk; statins lower it.",
        ),
        Page(
            2, "Aspirin thins blood. Aspirin lowers the risk of a second myocardial infarction, aspirin-wise."
        ),
    ]
    analyzer = Analyzer()
    gathered = DocumentTerms(analyzer)
    drafts = list(split(pages, chunk_size=size, chunk_overlap=overlap))
    for draft in drafts:
        gathered.add(draft.page, draft.start, draft.end, draft.text)
    assert len(drafts) > 2  # the chunks do overlap and repeat words
    assert gathered.counts() == sum((analyzer.term_counts(p.text) for p in pages), Counter())


def test_a_term_is_cut_to_a_length_an_index_key_can_hold() -> None:
    # 1,200 CJK characters between two punctuation marks are one token, 3,600 bytes in UTF-8: over
    # PostgreSQL's 2,704-byte limit on an index key, it failed the ingest of its whole batch.
    run = "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(1200))
    analyzer = Analyzer()
    [term] = analyzer.terms(f"{run}。")
    assert term == run[:MAX_TERM_CHARS] and len(term.encode()) < 2704 // 2
    assert analyzer.terms(run) == [term]  # a query holding the same run finds it


def test_a_page_longer_than_is_analysed_at_once_counts_as_the_whole_page(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A page is analysed in parts as its chunks come (cut at whitespace, which no term crosses): the
    counts are still those of its whole text."""
    monkeypatch.setattr(analyzer_module, "_ANALYSED_EVERY", 100)
    text = " ".join(f"Valve-{i} LDL-C statins lower o'clock risk{i}" for i in range(200))
    analyzer = Analyzer()
    gathered = DocumentTerms(analyzer)
    for draft in split([Page(1, text)], chunk_size=90, chunk_overlap=30):
        gathered.add(draft.page, draft.start, draft.end, draft.text)
    assert gathered.counts() == analyzer.term_counts(text)
