"""Cleaning: what every loader does to text before a page exists."""

from __future__ import annotations

import pytest

from citeline.load.clean import clean_inline, clean_text, storable


def test_words_broken_across_a_line_break_are_rejoined() -> None:
    assert clean_text("exam-\nple") == "example"


def test_rejoined_word_keeps_the_rest_of_the_line_on_the_next_line() -> None:
    assert clean_text("a good exam-\nple of it\nnext") == "a good example\nof it\nnext"


@pytest.mark.parametrize("text", ["LDL-C levels", "LDL-\nC", "COVID-\n19", "well-known"])
def test_real_hyphenated_compounds_are_kept(text: str) -> None:
    assert clean_text(text) == text


def test_soft_hyphens_vanish_and_rejoin_at_a_line_break() -> None:
    assert clean_text("con\u00adsider re\u00ad\nport") == "consider report"


def test_line_endings_are_normalised() -> None:
    assert clean_text("a\r\nb\rc\u2028d") == "a\nb\nc\nd"


def test_nul_and_control_characters_are_removed() -> None:
    assert clean_text("a\x00b\x07c\x1bd\ufeffe\tf") == "abcde\tf"


def test_blank_line_runs_collapse_to_one_and_trailing_spaces_go() -> None:
    assert clean_text("\n\none  \n \n\n\t\ntwo\u00a0\n\n") == "one\n\ntwo"


def test_ligatures_are_expanded() -> None:
    assert clean_text("\ufb01lled \ufb02ow o\ufb03ce") == "filled flow office"


def test_clean_inline_folds_everything_onto_one_line() -> None:
    assert clean_inline("  two\r\nlines\x00 and\ttabs ") == "two lines and tabs"


def test_lone_surrogates_become_the_replacement_character() -> None:
    # A file name or bytes decoded with "surrogateescape", or a "\ud800" escape: UTF-8 (and so
    # PostgreSQL) cannot hold one, and one failed the write of every document ingested with it.
    assert clean_text("caf\udce9 au lait\ud800") == "caf\ufffd au lait\ufffd"
    assert clean_inline(" Pump\ud800  guide ") == "Pump\ufffd guide"


def test_storable_replaces_nul_and_lone_surrogates_one_for_one() -> None:
    text = "a\x00b\udcffc\U0001f600"
    assert storable(text) == "a\ufffdb\ufffdc\U0001f600"
    assert len(storable(text)) == len(text)  # offsets into it still hold
    clean = "nothing to replace"
    assert storable(clean) is clean


# Hostile input: each of these took many seconds (quadratic in the run's length) before the pattern was
# fixed, and the upload's build held the API process's other threads all the while.


def test_a_long_run_of_spaces_inside_a_line_is_kept_and_the_trailing_ones_go() -> None:
    # 40,000 spaces not at a line's end: 12 to 16 s when the trailing-space pattern was tried from each.
    spaced = "start" + " " * 40_000 + "end"
    assert clean_text(f"{spaced}  \n{spaced}\t") == f"{spaced}\n{spaced}"


def test_a_list_nested_a_thousand_deep_keeps_its_indents() -> None:
    # Each line's indent was a run of spaces tried from each of its spaces: 9 s at 1,000 levels.
    nested = "".join(f"{'  ' * i}- item {i}\n" for i in range(1_000))
    assert clean_text(nested) == nested.rstrip("\n")
