"""load(): choosing a loader and refusing what cannot be loaded, before any content is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from citeline.errors import LoadError, UnsupportedTypeError
from citeline.load import SUPPORTED_SUFFIXES, content_type_of, load
from tests.conftest import PDFS


def test_supported_suffixes_cover_every_kind() -> None:
    assert set(SUPPORTED_SUFFIXES) == {".pdf", ".txt", ".md", ".markdown", ".html", ".htm", ".csv", ".tsv"}


# A small file of each kind the loaders read, by extension.
SAMPLES = {
    ".txt": "The relief valve opens at 6 bar.",
    ".md": "# Valves\n\nThe relief valve opens at 6 bar.",
    ".markdown": "# Valves\n\nThe relief valve opens at 6 bar.",
    ".html": "<html><body><h1>Valves</h1><p>The relief valve opens at 6 bar.</p></body></html>",
    ".htm": "<html><body><h1>Valves</h1><p>The relief valve opens at 6 bar.</p></body></html>",
    ".csv": "valve,bar\nrelief,6\n",
    ".tsv": "valve\tbar\nrelief\t6\n",
}


@pytest.mark.parametrize("suffix", SUPPORTED_SUFFIXES)
def test_the_content_type_said_by_a_file_s_name_is_the_one_its_loader_gives(
    tmp_path: Path, suffix: str
) -> None:
    # What a queued upload says it holds before it is built must not change when the build reads it.
    if suffix == ".pdf":
        path = PDFS / "multicol_federal_register_2020-17221.pdf"
    else:
        path = tmp_path / f"valves{suffix}"
        path.write_text(SAMPLES[suffix], encoding="utf-8")
    assert content_type_of(f"Valves{suffix.upper()}") == load(path).content_type
    assert content_type_of("slides.pptx") is None and content_type_of("noext") is None


def test_missing_file_is_named_with_the_reason(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.pdf"
    with pytest.raises(LoadError) as caught:
        load(missing)
    assert caught.value.source == str(missing)
    assert caught.value.reason == "file not found"
    assert str(missing) in str(caught.value)


def test_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LoadError, match="is a directory"):
        load(tmp_path)


def test_unsupported_suffix_names_it_and_lists_the_supported_ones(tmp_path: Path) -> None:
    path = tmp_path / "slides.PPTX"
    path.write_bytes(b"PK\x03\x04")
    with pytest.raises(UnsupportedTypeError) as caught:
        load(path)
    assert "'.pptx'" in caught.value.reason
    assert all(suffix in caught.value.reason for suffix in SUPPORTED_SUFFIXES)


@pytest.mark.parametrize("name", ["a.pdf", "a.txt", "a.md", "a.html", "a.csv", "noext"])
def test_zero_byte_files_are_empty(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.touch()
    with pytest.raises(LoadError) as caught:
        load(path)
    assert caught.value.reason == "empty file"


def test_suffix_is_matched_case_insensitively(tmp_path: Path) -> None:
    path = tmp_path / "NOTES.TXT"
    path.write_text("shouting file name")
    assert load(path).content_type == "text/plain"


def test_file_without_suffix_is_recognised_by_content(tmp_path: Path, pdf_dir: Path) -> None:
    pdf = tmp_path / "report"
    pdf.write_bytes((pdf_dir / "multicol_latex_pypdf_sample.pdf").read_bytes())
    html = tmp_path / "page"
    html.write_text("<!DOCTYPE html><html><head><title>T</title></head><body><p>Body text.</p></body></html>")
    text = tmp_path / "README"
    text.write_text("Just some words.")
    assert load(pdf).content_type == "application/pdf"
    assert load(html).content_type == "text/html"
    assert load(text).content_type == "text/plain"


def test_string_and_path_sources_are_equivalent(tmp_path: Path) -> None:
    path = tmp_path / "a.txt"
    path.write_text("same")
    assert next(load(str(path)).pages) == next(load(path).pages)


@pytest.mark.parametrize(
    ("opening", "encoding"),
    [
        ("\ufeff<!DOCTYPE html>", "utf-8"),  # a byte-order mark, as Windows editors write
        ("<!DOCTYPE html>", "utf-16"),  # the same in UTF-16
        ('<?xml version="1.0"?>\n<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0//EN">', "utf-8"),
        ("<!-- saved from url=(0014)about:internet -->\n<!DOCTYPE html>", "utf-8"),  # Internet Explorer
        ("\n  <!-- generated -->\n<HTML lang='en'>", "utf-8"),
    ],
    ids=["bom", "utf-16", "xhtml", "saved-from", "comment"],
)
def test_a_page_without_suffix_is_html_after_a_bom_xml_declaration_or_comment(
    tmp_path: Path, opening: str, encoding: str
) -> None:
    # A page saved without an extension (wget names a page by its URL's last segment) was read as plain
    # text, markup and all, when something came before its <!DOCTYPE html> or <html>.
    path = tmp_path / "onboarding"
    html = "<html><head><title>Onboarding</title></head><body><h1>Welcome</h1><p>Badges at reception.</p>"
    path.write_text(f"{opening}{html.removeprefix('<html>')}</body></html>", encoding=encoding)
    source = load(path)
    assert source.content_type == "text/html"
    assert next(source.pages).text == "# Welcome\n\nBadges at reception."
