"""locateSpan, the pure function that finds citeline's span among PDF.js's text items, run in chromium."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Page


def _locate(page: Page, items: list[str], span: str) -> dict[str, Any]:
    result: dict[str, Any] = page.evaluate("([items, span]) => locateSpan(items, span)", [items, span])
    return result


def _texts(items: list[str], result: dict[str, Any]) -> list[str]:
    return [items[r["item"]][r["start"] : r["end"]] for r in result["ranges"]]


def test_whitespace_hyphenation_and_ligatures_do_not_stop_a_whole_match(viewer_page: Page) -> None:
    items = ["Intro. The \ufb01rst exam-", "ple of  the", "method works.", " Next."]
    result = _locate(viewer_page, items, "The first example of the method works.")

    assert _texts(items, result) == ["The \ufb01rst exam-", "ple of  the", "method works."]
    assert result["matched"] == result["total"]
    assert {r["piece"] for r in result["ranges"]} == {0}


def test_a_span_read_across_columns_in_another_order_is_found_piece_by_piece(viewer_page: Page) -> None:
    # PDF.js reads the right column first; citeline's text runs from the left column into the right.
    items = ["continues in the right column here.", "Left column text ends with the span start"]
    result = _locate(viewer_page, items, "ends with the span start continues in the right column")

    assert _texts(items, result) == ["ends with the span start", "continues in the right column"]
    assert [r["piece"] for r in result["ranges"]] == [0, 1]
    assert result["matched"] == result["total"]


def test_characters_missing_from_the_text_layer_are_skipped_not_fatal(viewer_page: Page) -> None:
    items = ["Alpha beta gamma delta.", "Epsilon zeta eta theta."]
    result = _locate(viewer_page, items, "beta gamma Q delta. Epsilon zeta")

    assert _texts(items, result) == ["beta gamma delta.", "Epsilon zeta"]
    assert result["matched"] == result["total"] - 1


def test_short_words_found_elsewhere_are_not_highlighted(viewer_page: Page) -> None:
    items = ["a table of the results and of the rest"]
    result = _locate(viewer_page, items, "xyzzy of the plugh")

    assert result["ranges"] == []
    assert result["matched"] == 0


def test_a_span_without_letters_or_digits_locates_nothing(viewer_page: Page) -> None:
    assert _locate(viewer_page, ["-- * --"], "-- * --") == {
        "ranges": [],
        "matched": 0,
        "total": 0,
        "repeats": 0,
    }


def test_a_short_piece_found_once_on_the_page_is_kept(viewer_page: Page) -> None:
    # The running head's page number sits elsewhere in PDF.js's order than in citeline's text.
    items = ["The body of the page starts here and runs on.", "Journal 47699"]
    result = _locate(viewer_page, items, "Journal 47699 The body of the page starts here")

    assert _texts(items, result) == ["Journal 47699", "The body of the page starts here"]
    assert result["matched"] == result["total"]


def test_which_occurrence_of_a_repeated_passage_is_chosen_by_its_place_in_the_page_text(
    viewer_page: Page,
) -> None:
    page_text = "Same words here. Other words. Same words here. End."
    second = page_text.index("Same words here.", 1)
    items = ["Same words here. Other", "words. Same words here.", "End."]

    occurrence = viewer_page.evaluate(
        "([text, start, span]) => occurrenceBefore(text, start, span)",
        [page_text, second, "Same words here."],
    )
    result = viewer_page.evaluate(
        "([items, span, occurrence]) => locateSpan(items, span, {occurrence})",
        [items, "Same words here.", occurrence],
    )

    assert occurrence == 1
    assert result["repeats"] == 2
    assert result["ranges"] == [{"item": 1, "start": 7, "end": 23, "piece": 0}]


def test_a_table_header_that_names_each_column_with_its_group_is_found_word_by_word(
    viewer_page: Page,
) -> None:
    # citeline's Markdown header names each column with the group drawn once over it ("Handgun
    # Pre-Pawn"); PDF.js has the column names in a row and the group names after them. Each column name
    # is where the previous one ended; the short repeated ones must not be lost, and "handgun" must not
    # be taken from "handgun permits" below the table.
    items = ["State", "Handgun", "Long Gun", "Handgun", "Long Gun", "Totals", "Pre-Pawn", "Private Sale"]
    items.append("checks for handgun permits")
    span = "| State | Handgun Pre-Pawn | Long Gun Pre-Pawn | Handgun Private Sale | Long Gun Private Sale "
    span += "| Totals |"
    result = _locate(viewer_page, items, span)

    assert _texts(items, result) == [
        "State",
        "Handgun",
        "Pre-Pawn",
        "Long Gun",
        "Pre-Pawn",
        "Handgun",
        "Private Sale",
        "Long Gun",
        "Private Sale",
        "Totals",
    ]
    assert result["matched"] == result["total"]


def test_a_piece_is_not_begun_inside_a_word_on_both_sides(viewer_page: Page) -> None:
    # "mother preface" is not on the page; "Seller - Private" holds its letters "er pr" inside two words.
    items = ["Return to Seller - Private Sale", "Notes"]
    result = _locate(viewer_page, items, "Notes: mother preface")

    assert _texts(items, result) == ["Notes"]
