"""Ingestion into the catalog: versions, unchanged content, atomic swaps, deletes and bad input."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pypdf
import pytest
import sqlalchemy as sa

from citeline.engine import Citeline
from citeline.errors import InvalidRequestError
from citeline.ingest import IngestOptions, IngestResult, Outcome, Source
from citeline.jobs.submit import Upload
from citeline.retrieve.search import SearchRequest
from citeline.settings import Settings
from citeline.split import split
from citeline.store import catalog
from citeline.store.catalog import DocumentInfo, DocumentQuery
from citeline.types import LoadedSource, Page
from tests.conftest import PDFS, write

GUIDE = """# Pumps

## Priming

Before first use, prime the centrifugal pump by filling the casing with water until it overflows
at the vent plug. A dry pump destroys its mechanical seal within seconds.

## Storage

Drain the pump completely before winter storage so that frost cannot crack the volute.
"""


def _counts(cl: Citeline) -> tuple[int, int, int]:
    with cl.engine.connect() as conn:
        documents, chunks, postings = (
            int(conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one())
            for t in ("documents", "chunks", "postings")
        )
    return documents, chunks, postings


def test_markdown_is_stored_with_pages_offsets_and_sections(cl: Citeline, tmp_path: Path) -> None:
    path = write(tmp_path / "pump.md", GUIDE)
    [result] = cl.ingest([path])
    assert result.outcome is Outcome.ADDED
    doc = result.document
    assert doc is not None and doc.is_active and doc.status == "completed"
    assert doc.content_type == "text/markdown" and doc.version == 1 and doc.vector_count == result.chunks
    assert doc.embedding_model == "onnx:all-MiniLM-L6-v2"
    assert doc.file_path is not None and Path(doc.file_path).read_bytes() == path.read_bytes()

    hits = cl.search("how do I prime the pump before first use?")
    top = hits[0]
    assert "prime the centrifugal pump" in top.text
    assert top.page == 1 and top.section in {"Priming", "Pumps"}
    assert top.total_chunks == doc.vector_count and top.document_name == "pump.md"
    page_text = GUIDE  # one page: the cleaned text of an already clean file
    assert page_text[top.start : top.end] == top.text
    assert 0 < top.similarity <= 1 and abs(top.similarity - (1 - top.distance)) < 1e-9
    assert top.keyword_score > 0 and top.fused_score > 0


def test_unchanged_content_is_a_no_op_and_new_labels_are_applied_in_place(
    cl: Citeline, tmp_path: Path
) -> None:
    path = write(tmp_path / "pump.md", GUIDE)
    [first] = cl.ingest([path])
    before = _counts(cl)
    [again] = cl.ingest([path])
    assert again.outcome is Outcome.UNCHANGED and again.embedded == 0
    assert again.document is not None and first.document is not None
    assert again.document.id == first.document.id and again.document.version == 1
    assert _counts(cl) == before

    [relabelled] = cl.ingest([path], IngestOptions(scopes=("journey-a",), tags=("pumps",)))
    assert relabelled.outcome is Outcome.RELABELLED
    assert relabelled.document is not None and relabelled.document.scopes == ["journey-a"]
    assert _counts(cl) == before


def test_changed_file_becomes_a_new_version_that_replaces_the_old(cl: Citeline, tmp_path: Path) -> None:
    path = write(tmp_path / "pump.md", GUIDE)
    small = IngestOptions(chunk_size=200, chunk_overlap=0)
    [first] = cl.ingest([path], small)
    write(path, GUIDE.replace("winter storage", "long-term storage in a heated shed"))
    [second] = cl.ingest([path], small)
    assert second.outcome is Outcome.UPDATED
    assert second.document is not None and first.document is not None
    assert second.document.version == 2
    # Unchanged chunks reuse their vectors: only the edited chunk is embedded again.
    assert second.embedded < second.chunks
    docs = cl.documents()
    assert [(d.version, d.is_active) for d in docs] == [(2, True)]
    with cl.engine.connect() as conn:
        orphans = conn.execute(
            sa.text("SELECT count(*) FROM chunks WHERE document_id = :id"), {"id": first.document.id}
        ).scalar_one()
    assert orphans == 0
    texts = " ".join(h.text for h in cl.search("heated shed storage"))
    assert "heated shed" in texts and "winter storage" not in texts


def test_a_document_keeps_the_time_it_was_first_added_when_its_first_version_is_gone(
    cl: Citeline, tmp_path: Path
) -> None:
    """``added_at`` is when the document was first added, on every version; ``created_at`` when the
    current version was made. The first version is deleted once the second serves, and its time is
    kept all the same."""
    path = write(tmp_path / "pump.md", GUIDE)
    [first] = cl.ingest([path])
    assert first.document is not None
    assert first.document.added_at == first.document.created_at
    write(path, GUIDE.replace("winter storage", "long-term storage"))
    [second] = cl.ingest([path])
    assert second.document is not None and second.document.version == 2
    assert [d.version for d in cl.versions(first.document.id)] == [2]
    [listed] = cl.list_documents(DocumentQuery()).documents
    for doc in (second.document, listed, cl.document(str(first.document.id))):
        assert doc.added_at == first.document.created_at
        assert doc.created_at > first.document.created_at
    assert listed.as_dict()["added_at"] == first.document.created_at.isoformat()


def test_a_version_is_invisible_until_swapped_in(cl: Citeline, tmp_path: Path) -> None:
    path = write(tmp_path / "pump.md", GUIDE)
    cl.ingest([path])
    ingestor = cl.ingestor()
    # Build version 2 by hand up to, but not including, the swap.
    from citeline.ingest import file_source

    write(path, GUIDE.replace("Drain the pump", "Flush the impeller with glycol"))
    source = file_source(str(path), cl.files_dir)
    spec = catalog.VersionSpec(source.content_hash, cl.embedder.model_id, 1000, 150)
    with cl.engine.begin() as conn:
        doc, start = catalog.begin_version(
            conn, source_uri=source.uri, name=source.name, spec=spec, labels=IngestOptions().labels()
        )
    assert start is catalog.VersionStart.CREATED
    rows = [ingestor._row(d) for d in split(source.open().pages, chunk_size=1000, chunk_overlap=150)]
    vectors = cl.embedder.embed([r.text for r in rows])
    with cl.engine.begin() as conn:
        catalog.insert_chunks(conn, cl.embedder.model_id, [catalog.ChunkGroup(doc, rows, vectors)])

    assert "glycol" not in " ".join(
        h.text
        for h in cl.search(
            "flush the impeller with glycol",
        )
    )
    with cl.engine.begin() as conn:
        catalog.activate(
            conn,
            [
                catalog.Activation(
                    doc,
                    title="t",
                    content_type="text/markdown",
                    file_path=None,
                    page_count=1,
                    duration_ms=1,
                )
            ],
        )
    assert "glycol" in cl.search(SearchRequest("flush the impeller with glycol", top_k=1))[0].text


def test_a_failed_new_version_leaves_the_old_one_serving(cl: Citeline, tmp_path: Path) -> None:
    path = write(tmp_path / "notes.txt", "The relief valve opens at 6 bar.")
    [first] = cl.ingest([path])
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4)
    [failed] = cl.ingest([path])
    assert failed.outcome is Outcome.FAILED and failed.error and "notes.txt" in failed.error
    assert "looks like a PNG image, not text" in failed.error  # named by its first bytes (5ba659b)
    active = [d for d in cl.documents() if d.is_active]
    assert first.document is not None and [d.id for d in active] == [first.document.id]
    assert "6 bar" in cl.search("relief valve pressure")[0].text


def test_bad_inputs_are_reported_by_name_and_the_batch_goes_on(cl: Citeline, tmp_path: Path) -> None:
    good = write(tmp_path / "good.md", GUIDE)
    empty = write(tmp_path / "empty.txt", "   \n")
    binary = tmp_path / "binary.txt"
    binary.write_bytes(bytes(range(256)) * 8)
    unsupported = write(tmp_path / "table.xlsx", "not really")
    encrypted = tmp_path / "secret.pdf"
    writer = pypdf.PdfWriter(clone_from=PDFS / "multicol_latex_pypdf_sample.pdf")
    writer.encrypt("hunter2")
    with encrypted.open("wb") as fh:
        writer.write(fh)
    missing = tmp_path / "missing.pdf"
    scanned = tmp_path / "blank.pdf"  # no text layer, and no image for OCR to read
    blank = pypdf.PdfWriter()
    blank.add_blank_page(612, 792)
    with scanned.open("wb") as fh:
        blank.write(fh)

    results = cl.ingest([missing, empty, binary, unsupported, encrypted, scanned, good])
    by_name = {Path(r.source).name: r for r in results}
    assert by_name["good.md"].outcome is Outcome.ADDED
    reasons = {name: r.error or "" for name, r in by_name.items() if r.outcome is Outcome.FAILED}
    assert set(reasons) == {
        "missing.pdf",
        "empty.txt",
        "binary.txt",
        "table.xlsx",
        "secret.pdf",
        scanned.name,
    }
    for name, reason in reasons.items():
        assert name in reason, reason
    assert "file not found" in reasons["missing.pdf"]
    assert "empty" in reasons["empty.txt"]
    assert "binary" in reasons["binary.txt"]
    assert ".xlsx" in reasons["table.xlsx"]
    assert "encrypted" in reasons["secret.pdf"].lower() or "password" in reasons["secret.pdf"].lower()
    assert "no text layer (scanned?)" in reasons[scanned.name]
    failed = {d.name: d for d in cl.documents() if d.status == "failed"}
    assert set(failed) == set(reasons)
    assert all(d.error and not d.is_active and d.vector_count == 0 for d in failed.values())
    assert cl.search("prime the pump")[0].document_name == "good.md"


def test_delete_leaves_no_chunk_posting_vector_or_file(cl: Citeline, tmp_path: Path) -> None:
    path = write(tmp_path / "pump.md", GUIDE)
    [result] = cl.ingest([path])
    assert result.document is not None and result.document.file_path
    stored = Path(result.document.file_path)
    assert stored.exists()
    cl.delete(str(result.document.id)[:8])
    assert _counts(cl) == (0, 0, 0)
    assert not stored.exists()
    assert cl.stats()["chunks"] == 0
    assert cl.search("prime the pump") == []


def test_pdf_pages_are_kept(cl: Citeline) -> None:
    [result] = cl.ingest([PDFS / "multicol_federal_register_2020-17221.pdf"])
    assert result.outcome is Outcome.ADDED and result.document is not None
    assert result.document.page_count == 15
    with cl.engine.connect() as conn:
        pages = conn.execute(sa.text("SELECT DISTINCT page FROM chunks ORDER BY page")).scalars().all()
    assert pages[0] == 1 and pages[-1] == 15 and len(pages) >= 12


def test_what_the_loader_found_is_kept_apart_from_the_user_metadata(cl: Citeline, tmp_path: Path) -> None:
    page = write(
        tmp_path / "valves.html",
        '<html><head><title>Valves</title><meta name="author" content="Jane Roe"></head><body><article>'
        "<h1>Relief valves</h1><p>The relief valve of the boiler opens at 6 bar and must be tested "
        "every year by a certified inspector, who records the result in the boiler log.</p>"
        "</article></body></html>",
    )
    results = cl.ingest(
        [PDFS / "manual_faa_amt_handbook_sample.pdf", page], IngestOptions(metadata={"site": "plant-a"})
    )
    pdf, html = sorted(results, key=lambda r: r.source.endswith(".html"))

    assert pdf.document is not None and html.document is not None
    assert pdf.document.source_metadata["author"] == "FAA"
    assert pdf.document.source_metadata["pages"] == "1"
    assert html.document.source_metadata["author"] == "Jane Roe"
    assert pdf.document.metadata == html.document.metadata == {"site": "plant-a"}
    [shown] = [d for d in cl.documents() if d.name == "valves.html"]
    assert shown.source_metadata == html.document.source_metadata


def test_front_matter_lists_are_stored_as_lists_not_as_labels(cl: Citeline, tmp_path: Path) -> None:
    # The front matter is what the file says of itself: kept in source_metadata, lists as lists; the
    # labels that search filters use are still only the caller's.
    notes = write(
        tmp_path / "pumps.md",
        "---\ntitle: Pump care\ntags: [pumps, maintenance]\nauthors:\n  - Ada Okafor\n  - B. Lee\n---\n"
        "# Priming\n\nThe pump is primed for two minutes before the valve opens.\n",
    )
    [result] = cl.ingest([notes])

    assert result.document is not None and result.document.title == "Pump care"
    assert result.document.tags == []
    [shown] = cl.documents()
    assert shown.source_metadata == {
        "title": "Pump care",
        "tags": ["pumps", "maintenance"],
        "authors": ["Ada Okafor", "B. Lee"],
    }


def test_an_original_still_needed_by_another_source_is_kept(cl: Citeline, tmp_path: Path) -> None:
    a = write(tmp_path / "a.md", GUIDE)
    cl.ingest([a])
    b = write(tmp_path / "b.md", GUIDE)  # same content as a's first version
    write(a, GUIDE + "\nAppendix: torque values.\n")
    results = cl.ingest([a, b])
    assert [r.outcome for r in results] == [Outcome.UPDATED, Outcome.ADDED]
    for doc in cl.documents():
        assert doc.file_path is not None and Path(doc.file_path).exists(), doc.name


def _waiting_source(name: str, opened: threading.Event, go_on: threading.Event) -> Source:
    """A source that, once opened, waits for ``go_on`` before it gives its one page."""

    def opener() -> LoadedSource:
        def pages() -> Iterator[Page]:
            opened.set()
            go_on.wait(60)
            yield Page(1, "The bypass valve must stay closed during the pressure test.", ())

        return LoadedSource("text/plain", name, pages())

    return Source(name, f"mem://{name}", name, hashlib.sha256(name.encode()).hexdigest(), opener)


def _status(cl: Citeline, uri: str) -> list[tuple[str, str | None]]:
    with cl.engine.connect() as conn:
        return [
            (r[0], r[1])
            for r in conn.execute(
                sa.text("SELECT status, error FROM documents WHERE source_uri = :u ORDER BY version"),
                {"u": uri},
            )
        ]


def test_an_ingest_still_running_keeps_its_processing_version(cl: Citeline, tmp_path: Path) -> None:
    opened, go_on = threading.Event(), threading.Event()
    results: list[IngestResult] = []
    worker = threading.Thread(
        target=lambda: results.extend(
            cl.ingestor().ingest([_waiting_source("bypass", opened, go_on)], IngestOptions())
        )
    )
    worker.start()
    try:
        assert opened.wait(60)
        # Another ingest, which sweeps abandoned versions first, runs while the first one works.
        [other] = cl.ingest([write(tmp_path / "notes.txt", "The relief valve opens at 6 bar.")])
        assert other.outcome is Outcome.ADDED
        assert _status(cl, "mem://bypass") == [("processing", None)]
    finally:
        go_on.set()
        worker.join(60)
    assert [r.outcome for r in results] == [Outcome.ADDED]
    assert _status(cl, "mem://bypass") == [("completed", None)]


KILLED_INGEST = """
import sys, threading, time
from pathlib import Path
from citeline.engine import Citeline
from citeline.ingest import IngestOptions, Source
from citeline.settings import Settings
from citeline.types import LoadedSource, Page

def opener():
    def pages():
        Path(sys.argv[3]).write_text("opened")
        time.sleep(600)
        yield Page(1, "never read", ())
    return LoadedSource("text/plain", "stuck", pages())

with Citeline(Settings(data_dir=sys.argv[1], namespace=sys.argv[2], database_url=None)) as cl:
    cl.ingestor().ingest([Source("stuck", "mem://stuck", "stuck", "0" * 64, opener)], IngestOptions())
"""


@pytest.mark.parametrize("then", ["the next ingest", "the next process"])
def test_a_version_left_by_a_killed_ingest_is_failed_with_a_reason(
    cl: Citeline, settings: Settings, tmp_path: Path, then: str
) -> None:
    cl.documents()  # this process's store is open before the crash
    marker = tmp_path / "opened"
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_INGEST, str(settings.data_dir), settings.namespace, str(marker)]
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert child.poll() is None and time.monotonic() < deadline, "the child ingest never started"
            time.sleep(0.1)
        assert _status(cl, "mem://stuck") == [("processing", None)]
    finally:
        child.kill()
        child.wait(30)

    if then == "the next ingest":
        [other] = cl.ingest([write(tmp_path / "notes.txt", "The relief valve opens at 6 bar.")])
        assert other.outcome is Outcome.ADDED
        assert "6 bar" in cl.search("relief valve pressure")[0].text
    else:
        with Citeline(settings) as fresh:
            [stuck] = [d for d in fresh.documents() if d.source_uri == "mem://stuck"]
            assert (stuck.status, stuck.error) == ("failed", catalog.INTERRUPTED)
    assert _status(cl, "mem://stuck") == [("failed", catalog.INTERRUPTED)]


def test_a_source_named_twice_in_one_ingest_is_ingested_once(cl: Citeline, tmp_path: Path) -> None:
    path = write(tmp_path / "notes" / "valves.txt", "The relief valve opens at 6 bar.")
    link = tmp_path / "valves-link.txt"
    link.symlink_to(path)
    # The same file by its path twice, through a symlink, and inside a folder that is named too.
    results = cl.ingest([path, path, link, path.parent])
    assert [(r.source, r.outcome, r.error) for r in results] == [(str(path), Outcome.ADDED, None)]
    assert results[0].document is not None and results[0].document.version == 1
    assert [(d.name, d.version, d.status) for d in cl.documents()] == [("valves.txt", 1, "completed")]


def test_a_fifo_is_refused_as_not_a_regular_file_and_the_batch_goes_on(cl: Citeline, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    good = write(tmp_path / "good.txt", "The relief valve opens at 6 bar.")

    def feed() -> None:  # a writer that ends, so reading the pipe (which the ingest must not do) would end
        # The test's own open, below, lets it through and reads nothing: its write may find the pipe closed.
        with contextlib.suppress(BrokenPipeError), fifo.open("w") as fh:
            fh.write("text from a pipe")

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    try:
        results = cl.ingest([fifo, good])
    finally:
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # let the writer's open return
        writer.join(10)
    by_name = {Path(r.source).name: r for r in results}
    assert by_name["good.txt"].outcome is Outcome.ADDED
    assert by_name["pipe.txt"].outcome is Outcome.FAILED
    assert by_name["pipe.txt"].error == f"{fifo}: not a regular file"


def test_repeating_a_tag_or_scope_changes_no_labels(cl: Citeline, tmp_path: Path) -> None:
    path = write(tmp_path / "pump.md", GUIDE)
    [first] = cl.ingest([path], IngestOptions(scopes=("plant",), tags=("pumps",)))
    assert first.document is not None
    assert (first.document.scopes, first.document.tags) == (["plant"], ["pumps"])
    [again] = cl.ingest([path], IngestOptions(scopes=("plant", "plant"), tags=("pumps", "pumps")))
    assert again.outcome is Outcome.UNCHANGED


@pytest.mark.parametrize("category", ["/", "///", " / "])
def test_a_category_of_only_slashes_and_spaces_is_refused(category: str) -> None:
    with pytest.raises(InvalidRequestError, match=r'names no category .* or "" to remove the category'):
        IngestOptions(category=category)


def test_an_empty_category_removes_the_category_and_one_left_out_keeps_it(
    cl: Citeline, tmp_path: Path
) -> None:
    # As tags=() removes the tags: "" was read as "not given", and nothing could remove a category.
    path = write(tmp_path / "pump.md", GUIDE)
    [first] = cl.ingest([path], IngestOptions(category="Plant/Pumps"))
    assert first.document is not None
    doc = first.document.id
    assert cl.relabel(doc, IngestOptions(tags=("pumps",))).category == "Plant/Pumps"
    assert cl.relabel(doc, IngestOptions(category="")).category is None
    assert cl.list_documents(DocumentQuery(category="Plant")).total == 0
    # Through a re-ingest of the same content too: only the label changes, and it is stored as none.
    cl.relabel(doc, IngestOptions(category="Plant"))
    [again] = cl.ingest([path], IngestOptions(category=""))
    assert again.outcome is Outcome.RELABELLED and cl.document(str(doc)).category is None
    [once_more] = cl.ingest([path], IngestOptions(category=""))
    assert once_more.outcome is Outcome.UNCHANGED


def test_a_listing_by_source_prefix_is_one_synced_folder_matched_literally(cl: Citeline) -> None:
    """Several folders synced into one store, each under its own keys: a prefix lists one folder's
    documents, its % and _ are characters of the key, and it is read in the keys' composed form."""
    keys = (
        "handbook/a.md",
        "handbook/sub/b.md",
        "handbooks/c.md",
        "100%/d.md",
        "100x/e.md",
        "Caf\u00e9/f.md",
    )
    ids = {}
    for key in keys:
        upload = Upload(key.rsplit("/", 1)[1], io.BytesIO(f"# {key}\n\nThe text of {key}.".encode()))
        ids[key] = cl.submit(upload, source=key, index=False).document.id
    cl.submit(Upload("plain.md", io.BytesIO(b"# Plain\n\nNo key.")), index=False)

    def listed(prefix: str) -> set[str]:
        page = cl.list_documents(DocumentQuery(source_prefix=prefix, limit=None))
        assert page.total == len(page.documents)
        return {catalog.upload_key(d.source_uri) or "" for d in page.documents}

    assert listed("handbook/") == {"handbook/a.md", "handbook/sub/b.md"}
    assert listed("100%") == {"100%/d.md"}
    assert listed("handbook_") == set()
    assert listed("Cafe\u0301/") == {"Caf\u00e9/f.md"}
    # An empty prefix is every keyed document, and no other.
    assert listed("") == set(keys)
    assert cl.list_documents(DocumentQuery(source_prefix="handbook/", source="handbook/a.md")).total == 1
    assert [d.id for d in cl.list_documents(DocumentQuery(source_prefix="handbook/a")).documents] == [
        ids["handbook/a.md"]
    ]


def _keyed(cl: Citeline, key: str, text: str) -> Any:
    upload = Upload(key.rsplit("/", 1)[1], io.BytesIO(f"# {key}\n\n{text}".encode()))
    return cl.submit(upload, source=key, index=False).document.id


def test_a_listing_by_key_is_the_whole_listing_filtered_by_each_document_s_current_key(cl: Citeline) -> None:
    """Listing by ``source`` or ``source_prefix`` picks out of the unfiltered listing the documents whose
    current version has the key, after a new version and after a delete."""
    ids = {key: _keyed(cl, key, "First text.") for key in ("hb/a.md", "hb/b.md", "hb/sub/c.md", "other/d.md")}
    cl.submit(Upload("plain.md", io.BytesIO(b"# Plain\n\nNo key.")), index=False)

    def by_key(query: DocumentQuery) -> list[DocumentInfo]:
        page = cl.list_documents(query)
        assert page.total == len(page.documents)
        return page.documents

    def check() -> None:
        every = by_key(DocumentQuery(limit=None))
        for key in ("hb/a.md", "hb/b.md", "hb/sub/c.md", "other/d.md", "nowhere.md"):
            want = [d for d in every if d.source_uri == catalog.UPLOAD_KEY_SCHEME + key]
            assert by_key(DocumentQuery(source=key, limit=None)) == want, key
        for prefix in ("", "hb/", "hb/sub/", "other", "x"):
            want = [d for d in every if (catalog.upload_key(d.source_uri) or "").startswith(prefix)]
            want = [d for d in want if catalog.upload_key(d.source_uri) is not None]
            assert by_key(DocumentQuery(source_prefix=prefix, limit=None)) == want, prefix

    check()
    _keyed(cl, "hb/a.md", "Second text.")
    assert cl.document(str(ids["hb/a.md"])).version == 2
    check()
    cl.delete(str(ids["hb/sub/c.md"]))
    check()


def test_a_listing_by_key_reads_only_the_keyed_documents_versions(cl: Citeline) -> None:
    """The key narrows the rows by index before each document's current version is picked, rather
    than being matched after every version of every document was read."""
    for i in range(3):
        _keyed(cl, f"hb/{i}.md", "Text.")
    statements: list[tuple[str, Any]] = []
    with cl.engine.connect() as conn:
        # A few rows: without this the planner rightly reads the whole table, index or not.
        conn.exec_driver_sql("SET enable_seqscan = off")

        def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
            statements.append((statement, parameters))

        sa.event.listen(conn, "before_cursor_execute", record)
        catalog.query_documents(conn, DocumentQuery(source="hb/1.md"))
        catalog.query_documents(conn, DocumentQuery(source_prefix="hb/"))
        sa.event.remove(conn, "before_cursor_execute", record)
        plans = ["\n".join(r[0] for r in conn.exec_driver_sql("EXPLAIN " + s, p)) for s, p in statements]
    assert len(plans) == 4  # a count and a page, for each listing
    for plan in plans[:2]:
        assert "Index Cond: (source_uri = " in plan, plan
    for plan in plans[2:]:
        assert "Index Cond: ((source_uri ~>=~ " in plan, plan


def test_a_listing_takes_content_types_as_docs_list_shows_them_and_refuses_unknown_ones(cl: Citeline) -> None:
    """As search's filter does: ``csv`` is ``text/csv``, any case; a type no document can have is refused
    naming the known ones, where it matched nothing."""
    for name, text in (("valves.csv", "valve,bar\nrelief,6\n"), ("pump.md", "# Pump\n\nPrime it.")):
        cl.submit(Upload(name, io.BytesIO(text.encode())), index=False)

    def listed(content_type: str) -> list[str]:
        return [d.name for d in cl.list_documents(DocumentQuery(content_type=content_type)).documents]

    assert listed("text/csv") == listed("csv") == listed(" CSV ") == ["valves.csv"]
    assert listed("markdown") == ["pump.md"] and listed("pdf") == []
    with pytest.raises(
        InvalidRequestError, match=r"^content_type: unknown content type 'docx'; known: .*csv"
    ):
        DocumentQuery(content_type="docx")


def _slow_source(name: str, seconds: float) -> Source:
    def opener() -> LoadedSource:
        def pages() -> Iterator[Page]:
            time.sleep(seconds)
            yield Page(1, f"The {name} valve must stay closed during the pressure test.", ())

        return LoadedSource("text/plain", name, pages())

    return Source(name, f"mem://{name}", name, hashlib.sha256(name.encode()).hexdigest(), opener)


def test_each_source_reports_the_seconds_of_its_own_build(cl: Citeline) -> None:
    slow, quick = _slow_source("slow", 1.0), _slow_source("quick", 0.0)
    results = {r.source: r for r in cl.ingestor().ingest([slow, quick], IngestOptions())}
    assert results["slow"].seconds >= 1.0
    assert results["quick"].seconds < 0.5, "the quick source was charged the slow one's time"


def test_a_claimed_job_s_time_limit_counts_from_its_own_start(cl: Citeline, tmp_path: Path) -> None:
    for name in ("first.txt", "second.txt"):
        with write(tmp_path / name, f"The {name} relief valve opens at 6 bar.").open("rb") as fh:
            cl.submit(Upload(name, fh), IngestOptions())
    elapsed: dict[str, float] = {}

    def slow_first_page(doc: DocumentInfo, seconds: float, pages: int) -> str | None:
        elapsed.setdefault(doc.name, seconds)
        if doc.name == "first.txt":
            time.sleep(1.0)  # the first document takes a second before its first page
        return None

    results = cl.ingestor().run_jobs(limit=2, should_stop=slow_first_page)
    assert sorted((r.source, r.outcome) for r in results) == [
        ("first.txt", Outcome.ADDED),
        ("second.txt", Outcome.ADDED),
    ]
    assert set(elapsed) == {"first.txt", "second.txt"}
    assert elapsed["second.txt"] < 0.5, "the second job was charged the first one's time"
    # And so is the hard limit's clock, which the catalog keeps: the second began a second later.
    with cl.engine.connect() as conn:
        started: dict[str, datetime] = dict(
            conn.execute(sa.text("SELECT name, started_at FROM documents")).all()
        )
    assert (started["second.txt"] - started["first.txt"]).total_seconds() >= 0.9


def test_a_source_whose_earlier_versions_all_failed_is_added_when_one_succeeds(
    cl: Citeline, tmp_path: Path
) -> None:
    # "added" says the source had nothing to search before; "updated" that a version was replaced.
    note = write(tmp_path / "note.txt", "")
    (failed,) = cl.ingest([note])
    note.write_text("The relief valve opens at 16 bar.\n", encoding="utf-8")
    (first,) = cl.ingest([note])
    note.write_text("The relief valve opens at 18 bar.\n", encoding="utf-8")
    (second,) = cl.ingest([note])

    assert failed.outcome is Outcome.FAILED
    assert first.outcome is Outcome.ADDED and first.document is not None and first.document.version == 2
    assert second.outcome is Outcome.UPDATED


def test_many_versions_left_by_a_killed_ingest_are_reported_in_a_few_lines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # An eval stopped while ingesting its corpus left 145 versions, and the next command printed a
    # warning line for each before its own output.
    from types import SimpleNamespace
    from typing import Any, cast

    from citeline.ingest import settle_abandoned

    abandoned = [(SimpleNamespace(name=f"doc-{i}", version=1), None) for i in range(145)]
    with caplog.at_level("WARNING", logger="citeline"):
        settle_abandoned(cast(Any, None), cast(Any, abandoned))

    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 6
    assert lines[0] == f"doc-0 (version 1): {catalog.INTERRUPTED}"
    assert lines[-1] == f"and 140 more versions: {catalog.INTERRUPTED}"


def test_a_csv_hit_names_the_rows_of_the_file_it_holds(cl: Citeline, tmp_path: Path) -> None:
    # A clinician could not find "p.1 chars 912-1117" in the file; a spreadsheet shows it as row 6. The
    # header is row 1; the "sep=;" line Excel hides is no row, and the blank line is row 3.
    doses = write(
        tmp_path / "doses.csv",
        "sep=;\ndrug;dose\nmetformin;500 mg twice daily\n\nsitagliptin;100 mg once daily\n"
        "empagliflozin;10 mg once daily, halve below eGFR 45\n",
    )
    guide = write(tmp_path / "pump.md", GUIDE)
    cl.ingest([doses, guide])

    [hit] = cl.search(SearchRequest("empagliflozin dose eGFR", top_k=1))
    assert "empagliflozin" in hit.text and hit.rows == (5, 5)
    assert hit.as_dict()["rows"] == [5, 5]
    [doc] = [d for d in cl.documents() if d.name == "doses.csv"]
    assert [(c["text"].split(";")[0], c["rows"]) for c in cl.chunks(doc)] == [
        ("drug: metformin", [2, 2]),
        ("drug: sitagliptin", [4, 4]),
        ("drug: empagliflozin", [5, 5]),
    ]
    # Neither Markdown nor PDF has rows.
    [prose] = cl.search(SearchRequest("prime the pump before first use", top_k=1))
    assert prose.document_name == "pump.md" and prose.rows is None


def test_discovery_skips_what_vanishes_mid_walk_and_what_is_not_a_regular_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from citeline.ingest import discover

    kept = tmp_path / "docs" / "a.md"
    kept.parent.mkdir()
    kept.write_text("# Pump\n")
    (tmp_path / "docs" / "gone").mkdir()
    (tmp_path / "docs" / "gone" / "b.md").write_text("# Hose\n")
    os.mkfifo(tmp_path / "docs" / "pipe.md")  # reading it would wait for a writer for ever
    (tmp_path / "docs" / "dangling.md").symlink_to(tmp_path / "nowhere.md")
    (tmp_path / "docs" / "loop").symlink_to(tmp_path / "docs")  # as /proc/self: not followed
    real_scandir = os.scandir

    def scandir(path: Any = ".") -> Any:
        # A folder removed between being listed and being read, as /proc/<pid> of a process that ended.
        if str(path).endswith("gone"):
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    assert discover(tmp_path / "docs") == [str(kept)]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"scopes": "guide"}, "scopes: give a list of scopes, not the string 'guide'"),
        ({"tags": "ab"}, "tags: give a list of tags, not the string 'ab'"),
        ({"tags": (5,)}, "tags: a tag must be a string, got 5"),
        ({"metadata": [("site", "a")]}, "metadata: give a mapping of names to strings"),
        ({"category": 5}, "category: give a string, not 5"),
        ({"chunk_size": "10"}, "chunk_size: give a whole number, not '10'"),
        ({"chunk_overlap": 2.5}, "chunk_overlap: give a whole number, not 2.5"),
        ({"chunk_size": True}, "chunk_size: give a whole number, not True"),
    ],
)
def test_options_of_the_wrong_type_are_refused_naming_the_field(given: dict[str, Any], message: str) -> None:
    # A string is itself a sequence of strings: scopes="guide" stored the scopes g, u, i, d and e.
    with pytest.raises(InvalidRequestError, match=f"^{re.escape(message)}"):
        IngestOptions(**given)


def test_labels_given_as_lists_are_taken_as_tuples_are() -> None:
    options = IngestOptions(scopes=["plant"], tags=["pumps"], chunk_size=400)  # type: ignore[arg-type]
    assert (options.labels().scopes, options.labels().tags) == (("plant",), ("pumps",))
