"""Scanned PDFs are read by OCR (Debian's tesseract-ocr): upright or turned 90 degrees."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pypdf
import pytest
from typer.testing import CliRunner

from citeline.cli import app
from citeline.load import load
from citeline.settings import Settings
from tests.conftest import PDFS
from tests.load.conftest import _pdf_bytes

SCANS = ["scanned_docling_ocr_test.pdf", "scanned_docling_ocr_test_rotated_90.pdf"]


@pytest.mark.parametrize("name", SCANS)
def test_a_scanned_page_is_read_upright_with_its_confidence_kept(name: str) -> None:
    source = load(PDFS / name)
    [page] = list(source.pages)
    assert "Docling bundles PDF document conversion to JSON and Markdown" in " ".join(page.text.split())
    confidences = source.metadata["ocr_confidence"]
    assert isinstance(confidences, str)
    page_number, confidence = confidences.split("=")
    assert page_number == "1" and float(confidence) > 80
    assert source.metadata.get("ocr_rotated") == ("1=90" if "rotated" in name else None)


def test_a_scanned_document_is_found_by_citeline_search(settings: Settings) -> None:
    base = ["--data-dir", str(settings.data_dir), "--namespace", settings.namespace]
    runner = CliRunner()
    ingested = runner.invoke(app, [*base, "ingest", *(str(PDFS / n) for n in SCANS)])
    assert ingested.exit_code == 0, ingested.stderr
    found = runner.invoke(app, [*base, "search", "self contained package", "--json"])
    assert found.exit_code == 0, found.stderr
    # Both scans read alike: a passage the two hold word for word is one hit naming its copy.
    hits = json.loads(found.stdout)
    names = {hit["document_name"] for hit in hits} | {c["document_name"] for h in hits for c in h["also_in"]}
    assert names == set(SCANS)
    shown = runner.invoke(app, [*base, "docs", "list", "--json"])
    metadata = {d["name"]: d["source_metadata"] for d in json.loads(shown.stdout)}
    assert metadata["scanned_docling_ocr_test_rotated_90.pdf"]["ocr_rotated"] == "1=90"


def _stamped_scan(tmp_path: Path, pages: int = 3) -> Path:
    """Scanned pages, each stamped with a Bates number in a text layer."""
    writer = pypdf.PdfWriter()
    for number in range(1, pages + 1):
        scan = pypdf.PdfReader(PDFS / "scanned_docling_ocr_test.pdf").pages[0]
        size = (int(scan.mediabox.width), int(scan.mediabox.height))
        stamp = pypdf.PdfReader(
            io.BytesIO(_pdf_bytes(b"BT /F1 9 Tf 450 20 Td (ACME-%06d) Tj ET" % number, size, None))
        )
        writer.add_page(scan).merge_page(stamp.pages[0])
    path = tmp_path / "production.pdf"
    with path.open("wb") as file:
        writer.write(file)
    return path


def test_a_scan_stamped_with_a_running_line_is_still_read_by_ocr(tmp_path: Path) -> None:
    # A scan whose pages carry a stamp in a text layer (a Bates number, Acrobat's "Page 1 of 3") has text
    # on every page, so no page was sent to OCR; the stamp is a running line and is dropped, and the
    # pages came out empty: the document said nothing of what the scans show.
    source = load(_stamped_scan(tmp_path))
    pages = list(source.pages)
    for page in pages:
        assert "Docling bundles PDF document conversion to JSON" in " ".join(page.text.split())
        assert "ACME" not in page.text
    confidences = source.metadata["ocr_confidence"]
    assert isinstance(confidences, str)
    assert [item.split("=")[0] for item in confidences.split()] == ["1", "2", "3"]


def test_a_stamped_scan_left_unread_without_tesseract_names_its_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    source = load(_stamped_scan(tmp_path))
    assert [page.text for page in source.pages] == ["", "", ""]
    assert source.metadata == {"pages": "3", "ocr_unread": "1 2 3"}


def _outlined(tmp_path: Path) -> Path:
    """The scanned fixture's words drawn as vector shapes, as a design or CAD program exports text it has
    turned into outlines: no text layer and no image, only filled paths."""
    import pypdfium2 as pdfium

    page = pdfium.PdfDocument(PDFS / "scanned_docling_ocr_test.pdf")[0]
    width, height = page.get_size()
    image = page.render(scale=1).to_pil().convert("L")
    dark = image.load()
    shapes = []
    for y in range(image.height):
        x = 0
        while x < image.width:
            start = x
            while x < image.width and dark[x, y] < 128:
                x += 1
            if x > start:
                shapes.append(b"%d %.1f %d 1 re" % (start, height - y - 1, x - start))
            x += 1
    path = tmp_path / "outlined.pdf"
    path.write_bytes(_pdf_bytes(b"0 g " + b" ".join(shapes) + b" f", (int(width), int(height)), None))
    return path


def test_text_drawn_as_outlines_is_read_by_ocr(tmp_path: Path) -> None:
    # Only a page showing an image was sent to OCR, so a page whose words are vector outlines (a poster or
    # brochure exported with outlined fonts, a CAD drawing) failed as "no text layer (scanned?)".
    source = load(_outlined(tmp_path))
    [page] = list(source.pages)
    assert "Docling bundles PDF document conversion to JSON and Markdown" in " ".join(page.text.split())
    assert str(source.metadata["ocr_confidence"]).startswith("1=")


def test_a_short_scan_stamped_in_a_text_layer_is_read_by_ocr(tmp_path: Path) -> None:
    # With fewer than three pages no running line is learned, so the stamp stayed the page's only text:
    # a scanned letter with a Bates number was stored as "ACME-000001", its letter lost.
    source = load(_stamped_scan(tmp_path, pages=1))
    [page] = list(source.pages)
    assert "Docling bundles PDF document conversion to JSON" in " ".join(page.text.split())
    assert str(source.metadata["ocr_confidence"]).startswith("1=")
