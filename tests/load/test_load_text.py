"""Plain text: decoding, binary and empty files, form-feed pages."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from citeline.errors import LoadError
from citeline.load import load
from tests.conftest import PDFS

SAMPLE = "Café naïve résumé — “quoted” façade, 10 € please.\nStraße über Ärger.\n"


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig", "utf-16", "cp1252"])
def test_encodings_are_detected(tmp_path: Path, encoding: str) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(SAMPLE.encode(encoding))
    source = load(path)
    assert source.content_type == "text/plain"
    assert source.title == "notes"
    assert next(source.pages).text == SAMPLE.strip()


@pytest.mark.parametrize(
    "text",
    ["Le cœur a ses raisons. Café crème, déjà vu, été à Paris.", "café", "Größere Änderungen, sagte er."],
)
def test_short_latin1_text_decodes_as_cp1252(tmp_path: Path, text: str) -> None:
    path = tmp_path / "short.txt"
    path.write_bytes(text.encode("cp1252"))
    assert next(load(path).pages).text == text


@pytest.mark.parametrize(
    "data",
    [
        random.Random(7).randbytes(4096),
        b"plain start\x00\x00\x00\x01\x02\x03\x00\x00\x00" * 20,
    ],
    ids=["random", "nul-riddled"],
)
def test_binary_content_is_refused(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "image.txt"
    path.write_bytes(data)
    with pytest.raises(LoadError) as caught:
        load(path)
    assert caught.value.reason == "binary content, not text"


@pytest.mark.parametrize(
    ("name", "data", "reason"),
    [
        (
            "report.txt",
            (PDFS / "multicol_latex_pypdf_sample.pdf").read_bytes(),
            "looks like a PDF (it starts with %PDF); rename it to .pdf",
        ),
        (
            "notes.md",
            b"PK\x03\x04\x14\x00\x06\x00\x08\x00\x00\x00!\x00" + bytes(range(256)) * 4,
            "looks like a ZIP archive, as .docx, .xlsx and .pptx files are, not text; citeline reads none "
            "of them: save it as PDF, text or CSV",
        ),
        (
            "sheet.csv",
            b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(range(256)) * 4,
            "looks like an old Office file (.doc, .xls, .ppt), not text; save it as PDF, text or CSV",
        ),
        (
            "image.txt",
            b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10\x00\x00\x00\x10\x08\x06\x00\x00\x00\x1f\xf3\xffa",
            "looks like a PNG image, not text; citeline reads an image only as a page of a PDF (by OCR)",
        ),
        (
            "photo.txt",
            b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + bytes(range(256)) * 4,
            "looks like a JPEG image, not text; citeline reads an image only as a page of a PDF (by OCR)",
        ),
    ],
    ids=["pdf", "zip-office", "old-office", "png", "jpeg"],
)
def test_a_binary_file_of_another_kind_is_refused_naming_that_kind(
    tmp_path: Path, name: str, data: bytes, reason: str
) -> None:
    # A real PDF named .txt was refused as "binary content, not text", which leaves its owner guessing.
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(LoadError) as caught:
        load(path)
    assert caught.value.reason == reason


def test_whitespace_only_file_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "blank.txt"
    path.write_text(" \n\t\n\r\n")
    with pytest.raises(LoadError) as caught:
        load(path)
    assert caught.value.reason == "empty file"


def test_form_feeds_split_pages(tmp_path: Path) -> None:
    path = tmp_path / "printout.txt"
    path.write_text("first page\fsecond page\f\fa fourth\f\n")
    pages = list(load(path).pages)
    assert [(page.number, page.text) for page in pages] == [
        (1, "first page"),
        (2, "second page"),
        (3, ""),
        (4, "a fourth"),
    ]


def test_text_is_cleaned(tmp_path: Path) -> None:
    path = tmp_path / "scan.txt"
    path.write_bytes(b"An exam-\r\nple of LDL-C.   \r\n\r\n\r\n\r\nNext\x00 para.")
    assert next(load(path).pages).text == "An example\nof LDL-C.\n\nNext para."


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be"])
def test_utf16_without_a_byte_order_mark_is_read_as_text(tmp_path: Path, encoding: str) -> None:
    # Some Windows tools (database exports, .NET's Encoding.Unicode) write UTF-16 with no BOM. Its
    # ASCII text is valid UTF-8 byte for byte, with a NUL beside every letter, so it was read
    # as UTF-8 and refused as binary content.
    text = "Pump log, unit 7.\nThe discharge pressure was 40 psi at 10:00; the valve opened at 45.\n"
    path = tmp_path / "log.txt"
    path.write_bytes(text.encode(encoding))
    [page] = load(path).pages
    assert page.text == text.strip()


def test_a_utf8_file_with_a_few_latin1_bytes_is_read_as_text(tmp_path: Path) -> None:
    # Notes kept in UTF-8 and a line pasted or appended from a Windows-1252 file: strict UTF-8 fails,
    # no single encoding reads the whole, and the file was refused as "binary content, not text".
    utf8 = "Le café crème coûte 3 €. Ärger über Straße — “quoted”.\n" * 5
    path = tmp_path / "notes.txt"
    path.write_bytes(utf8.encode("utf-8") + "Une ligne collée: déjà vu, 5 €.\n".encode("cp1252"))
    [page] = load(path).pages
    assert page.text == (utf8 + "Une ligne collée: déjà vu, 5 €.").strip()
