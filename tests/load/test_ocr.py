"""Scanned PDFs are read by OCR (Debian's tesseract-ocr): upright or turned 90 degrees."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from citeline.cli import app
from citeline.load import load
from citeline.settings import Settings
from tests.conftest import PDFS

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
    names = {hit["document_name"] for hit in json.loads(found.stdout)}
    assert names == set(SCANS)
    shown = runner.invoke(app, [*base, "docs", "list", "--json"])
    metadata = {d["name"]: d["source_metadata"] for d in json.loads(shown.stdout)}
    assert metadata["scanned_docling_ocr_test_rotated_90.pdf"]["ocr_rotated"] == "1=90"
