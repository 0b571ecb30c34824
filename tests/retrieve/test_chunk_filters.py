"""Auto-metadata filters (model number, section type) are applied inside the index queries, per chunk."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from citeline.cli import app
from citeline.engine import Citeline
from citeline.errors import InvalidRequestError
from citeline.ingest import IngestOptions
from citeline.retrieve.filters import Filters
from citeline.retrieve.search import SearchRequest
from tests.conftest import write
from tests.test_annotate import MANUAL

QUERY = "the unit does not start, what should I check?"
#: Chunks no longer than the manual's sections, so that each chunk is one section.
SECTIONS = IngestOptions(chunk_size=200, chunk_overlap=0)


@pytest.fixture
def manuals(cl: Citeline, tmp_path: Path) -> Citeline:
    """The XR-200 manual, an XR-300 manual, and thirty notes that answer the query better than either
    but name no model and belong to no section type."""
    cl.ingest([write(tmp_path / "xr200.md", MANUAL)], SECTIONS)
    cl.ingest(
        [write(tmp_path / "xr300.md", MANUAL.replace("XR-200", "XR-300").replace("5520A", "5530B"))],
        SECTIONS,
    )
    notes = [
        write(tmp_path / f"note-{i:02}.txt", f"Note {i}: the unit does not start, what should I check?")
        for i in range(30)
    ]
    cl.ingest(notes)
    return cl


@pytest.mark.parametrize("exact_below", [0, 1_000_000], ids=["hnsw-iterative", "exact-scan"])
@pytest.mark.parametrize("keyword_index", ["sql", "memory"])
def test_a_section_type_filter_keeps_top_k_to_that_section(
    manuals: Citeline, exact_below: int, keyword_index: str
) -> None:
    cl = manuals.derive(exact_search_below=exact_below, keyword_index=keyword_index)
    try:
        unfiltered = cl.search(SearchRequest(QUERY, top_k=3))
        assert all(h.document_name.startswith("note-") for h in unfiltered)
        hits = cl.search(SearchRequest(QUERY, Filters(section_types=("troubleshooting",)), top_k=3))
        assert {h.document_name for h in hits} == {"xr200.md", "xr300.md"}
        assert all(h.section_type == "troubleshooting" and "does not start" in h.text for h in hits)
    finally:
        cl.close()


@pytest.mark.parametrize("spelling", ["XR-200", "xr200", "Xr 200"])
def test_a_model_number_filter_matches_however_it_is_spelt(manuals: Citeline, spelling: str) -> None:
    hits = manuals.search(SearchRequest(QUERY, Filters(model_numbers=(spelling,)), top_k=10))
    assert hits and {h.document_name for h in hits} == {"xr200.md"}
    assert all("XR200" in h.model_numbers for h in hits)
    both = manuals.search(
        SearchRequest(QUERY, Filters(model_numbers=("5520A", "5530B"), section_types=("troubleshooting",)))
    )
    assert {h.document_name for h in both} == {"xr200.md", "xr300.md"}
    assert manuals.search(SearchRequest(QUERY, Filters(model_numbers=("ZZ-999",)))) == []


def test_a_metadata_filter_compares_strings_and_a_scope_is_never_blank() -> None:
    # Metadata is stored and compared as strings: a number would never match, so it is refused.
    with pytest.raises(InvalidRequestError, match=r"metadata\.k: a metadata value must be a string, got 1"):
        Filters(metadata={"k": 1})
    with pytest.raises(InvalidRequestError, match="a scope must not be empty or blank"):
        Filters(scopes=("ward-a", ""))
    with pytest.raises(InvalidRequestError, match="a tag must not be empty or blank"):
        Filters(tags_all=(" ",))
    with pytest.raises(InvalidRequestError, match="a tag must not be empty or blank"):
        IngestOptions(tags=("pumps", ""))
    assert Filters(metadata={"k": "1"}, scopes=()).scopes == ()


def test_an_unknown_section_type_is_refused_with_the_known_ones() -> None:
    with pytest.raises(InvalidRequestError, match="unknown section type 'faq'; known: safety, installation"):
        Filters(section_types=("faq",))


def test_the_cli_filters_and_shows_auto_metadata(manuals: Citeline) -> None:
    settings = manuals.settings
    result = CliRunner().invoke(
        app,
        ["--data-dir", str(settings.data_dir), "--namespace", settings.namespace, "search", QUERY,
         "--model", "xr-300", "--section", "troubleshooting", "-k", "1"],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert "xr300.md p.1 § Troubleshooting [troubleshooting] models XR300, 5530B" in result.stdout
