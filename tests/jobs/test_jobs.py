"""Ingestion as per-document jobs: upload answers at once, a runner builds, nothing stays stuck."""

from __future__ import annotations

import io
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pypdf
import pytest
import sqlalchemy as sa

import citeline.engine
from citeline.access import Access
from citeline.engine import Citeline
from citeline.errors import (
    AccessDeniedError,
    ConflictError,
    InvalidRequestError,
    LimitExceededError,
    NotFoundError,
    UnsupportedTypeError,
)
from citeline.ingest import IngestOptions, Outcome
from citeline.jobs.submit import Submission, Upload
from citeline.load.pdf import NO_TEXT_LAYER
from citeline.retrieve.filters import Filters
from citeline.retrieve.search import SearchRequest
from citeline.settings import Settings
from citeline.store import catalog
from citeline.store.catalog import DocumentInfo
from citeline.store.models import Status
from tests.conftest import PDFS
from tests.jobs.conftest import UnreachableStore, wait_for_status

#: Seconds to wait for a job: generous, since a loaded machine is slow, and a stuck job fails anyway.
WAIT = 180.0

PUMP = (
    "# Pump manual\n\n"
    + "Prime the centrifugal pump by filling its casing with water until it overflows at the vent. " * 12
    + "\n\n## Storage\n\n"
    + "Drain the pump completely before winter storage so that frost cannot crack the volute. " * 12
)


def upload(name: str, text: str) -> Upload:
    return Upload(name, io.BytesIO(text.encode()))


@pytest.fixture
def jobs(settings: Settings) -> Iterator[Citeline]:
    """A store whose job runner polls fast, torn down with its schema."""
    with Citeline(settings.model_copy(update={"job_poll_seconds": 0.1, "job_retry_delay": 0.1})) as cl:
        yield cl
        with cl.engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "citeline_{settings.namespace}" CASCADE'))


def configured(settings: Settings, **overrides: object) -> Citeline:
    fast = {"job_poll_seconds": 0.1, "job_retry_delay": 0.1, **overrides}
    return Citeline(settings.model_copy(update=fast))


def test_an_upload_is_queued_at_once_and_built_by_the_runner(jobs: Citeline) -> None:
    submitted = jobs.submit(upload("pump.md", PUMP), IngestOptions(scopes=("plant-a",), tags=("manual",)))
    assert submitted.created and submitted.document.status == "queued"
    assert submitted.document.vector_count == 0 and jobs.search("prime the pump") == []
    jobs.start_jobs()
    done = jobs.wait(submitted.document.id, timeout=WAIT)
    assert done.status == "completed" and done.is_active and done.attempts == 1
    assert done.id == submitted.document.id and done.version == 1
    assert done.title == "Pump manual" and done.name == "pump.md" and done.scopes == ["plant-a"]
    assert done.vector_count > 1 and done.started_at is not None and done.duration_ms
    [hit, *_] = jobs.search("how do I prime the pump?")
    assert hit.document_id == done.id and "Prime the centrifugal pump" in hit.text


def test_an_upload_says_what_it_holds_before_it_is_built(jobs: Citeline) -> None:
    # The answer to the upload and the list name its type at once (it was null until the build): the
    # type the loader of its extension gives, which the build then confirms.
    submitted = jobs.submit(upload("pump.md", PUMP))
    assert submitted.document.status == "queued" and submitted.document.content_type == "text/markdown"
    jobs.start_jobs()
    assert jobs.wait(submitted.document.id, timeout=WAIT).content_type == "text/markdown"


def test_replacing_a_document_keeps_its_id_and_swaps_the_new_version_in(jobs: Citeline) -> None:
    jobs.start_jobs()
    first = jobs.wait(jobs.submit(upload("pump.md", PUMP)).document.id, timeout=WAIT)
    replaced = jobs.submit(upload("pump-v2.md", PUMP.replace("winter", "frosty")), document_id=first.id)
    assert replaced.created and replaced.document.id == first.id and replaced.document.version == 2
    done = jobs.wait(first.id, timeout=WAIT)
    assert done.version == 2 and done.name == "pump-v2.md"
    assert [(v.version, v.status) for v in jobs.versions(first.id)] == [(2, "completed")]
    texts = " ".join(h.text for h in jobs.search(SearchRequest("storage before winter", top_k=20)))
    assert "frosty" in texts and "before winter storage" not in texts


def test_a_newer_version_queued_while_an_older_one_builds_is_kept_and_built_after_it(jobs: Citeline) -> None:
    """Two replacements sent one after the other (two admins, or a retried upload) are both queued;
    whichever is built first must not take the other's version with it: the newer one, still queued,
    or pending (index=False), is built afterwards and is what readers end with."""
    ingestor = jobs.ingestor()
    first = jobs.submit(upload("pump.md", PUMP)).document
    ingestor.run_jobs(limit=1, version_ids=[first.version_id])
    second = jobs.submit(upload("pump-v2.md", PUMP.replace("winter", "frosty")), document_id=first.id)
    third = jobs.submit(upload("pump-v3.md", PUMP.replace("winter", "icy")), document_id=first.id)
    snowy = upload("pump-v4.md", PUMP.replace("winter", "snowy"))
    later = jobs.submit(snowy, document_id=first.id, index=False)
    assert [s.document.version for s in (second, third, later)] == [2, 3, 4]
    ingestor.run_jobs(limit=1, version_ids=[second.document.version_id])
    versions = {v.version: v.status for v in jobs.versions(first.id)}
    assert versions == {2: "completed", 3: "queued", 4: "pending"}
    assert jobs.document(str(first.id)).version == 2
    ingestor.run_jobs(limit=1, version_ids=[third.document.version_id])
    assert {v.version: v.status for v in jobs.versions(first.id)} == {3: "completed", 4: "pending"}
    texts = " ".join(h.text for h in jobs.search(SearchRequest("storage before winter", top_k=20)))
    assert "icy" in texts and "frosty" not in texts


def test_an_older_version_still_queued_when_a_newer_one_is_swapped_in_is_retired(jobs: Citeline) -> None:
    """The other order: the newest version is built first; the older one still queued would only
    bring back what it replaced, so it goes with the rest."""
    ingestor = jobs.ingestor()
    first = jobs.submit(upload("pump.md", PUMP)).document
    ingestor.run_jobs(limit=1, version_ids=[first.version_id])
    second = jobs.submit(upload("pump-v2.md", PUMP.replace("winter", "frosty")), document_id=first.id)
    third = jobs.submit(upload("pump-v3.md", PUMP.replace("winter", "icy")), document_id=first.id)
    ingestor.run_jobs(limit=1, version_ids=[third.document.version_id])
    assert {v.version: v.status for v in jobs.versions(first.id)} == {3: "completed"}
    assert ingestor.run_jobs(limit=1, version_ids=[second.document.version_id]) == []


def test_a_replacement_of_a_document_with_no_live_version_keeps_its_labels(jobs: Citeline) -> None:
    """A replacement that gives no labels keeps the document's, whether its current version is live,
    failed (a corrupt first upload, uploaded again fixed) or still queued: it took none and became
    universal, readable by every reader key, when no version was live yet."""
    ingestor = jobs.ingestor()
    plant_a = IngestOptions(scopes=("plant-a",), tags=("manual",))
    broken = jobs.submit(Upload("pump.pdf", io.BytesIO(b"not a pdf")), plant_a).document
    ingestor.run_jobs(limit=1, version_ids=[broken.version_id])
    assert jobs.document(str(broken.id)).status == "failed"
    fixed = jobs.submit(upload("pump.md", PUMP), document_id=broken.id).document
    assert (fixed.scopes, fixed.tags) == (["plant-a"], ["manual"])
    queued = jobs.submit(upload("valve.md", PUMP.replace("pump", "valve")), plant_a).document
    replaced = jobs.submit(upload("valve-v2.md", PUMP.replace("pump", "gate valve")), document_id=queued.id)
    assert (replaced.document.scopes, replaced.document.tags) == (["plant-a"], ["manual"])
    ingestor.run_jobs(limit=3)
    reader_b = Access.reader({"plant-b"}, "k-b")
    assert jobs.search(SearchRequest("prime the pump", filters=Filters()), access=reader_b) == []
    with pytest.raises(NotFoundError):
        jobs.document(str(broken.id), access=reader_b)


def test_two_replacements_claimed_in_one_batch_build_the_newest_and_report_the_other(jobs: Citeline) -> None:
    """The thread runner claims up to CITELINE_JOB_BATCH versions at once; two replacements of one
    document among them: the newest is swapped in and retires the other, which is reported superseded.
    Reporting it looked the retired version up and raised NotFoundError out of the whole batch."""
    ingestor = jobs.ingestor()
    first = jobs.submit(upload("pump.md", PUMP)).document
    ingestor.run_jobs(limit=1, version_ids=[first.version_id])
    jobs.submit(upload("pump-v2.md", PUMP.replace("winter", "frosty")), document_id=first.id)
    jobs.submit(upload("pump-v3.md", PUMP.replace("winter", "icy")), document_id=first.id)
    results = ingestor.run_jobs(limit=5)
    assert sorted(r.outcome for r in results) == sorted([Outcome.UPDATED, Outcome.UNCHANGED])
    assert [(v.version, v.status) for v in jobs.versions(first.id)] == [(3, "completed")]


def test_the_same_content_again_is_no_new_version_and_new_labels_are_applied(jobs: Citeline) -> None:
    jobs.start_jobs()
    first = jobs.wait(jobs.submit(upload("pump.md", PUMP)).document.id, timeout=WAIT)
    again = jobs.submit(upload("pump.md", PUMP), IngestOptions(category="Plant"), document_id=first.id)
    assert again.outcome is Outcome.RELABELLED and again.document.version == 1
    assert again.document.category == "Plant"


def test_an_upload_names_the_documents_holding_its_bytes_before_they_are_built(jobs: Citeline) -> None:
    # No runner: every version stays queued (or pending). Their bytes are known from the upload, so a
    # copy sent right after the first is told, as it is once the first is built; a cancelled one is not.
    def names(submission: Submission) -> list[str]:
        return [same.name for same in submission.same_content]

    first = jobs.submit(upload("pump.md", PUMP))
    assert first.document.status == "queued" and first.same_content == ()
    copy = jobs.submit(upload("pump (copy).md", PUMP))
    assert copy.same_content == (catalog.SameContent(first.document.id, "pump.md"),)
    held = jobs.submit(upload("pump (held).md", PUMP), index=False)
    assert held.document.status == "pending" and names(held) == ["pump (copy).md", "pump.md"]
    # The upload's own document is never named, though its other version holds the bytes.
    again = jobs.submit(upload("pump (copy).md", PUMP), document_id=copy.document.id)
    assert names(again) == ["pump (held).md", "pump.md"]
    assert jobs.cancel(first.document.id).error == "cancelled"
    assert names(jobs.submit(upload("pump (third).md", PUMP))) == ["pump (copy).md", "pump (held).md"]
    assert jobs.submit(upload("other.md", PUMP + "\n\nUnit 2.")).same_content == ()


def test_a_pending_document_waits_until_asked_to_index(jobs: Citeline) -> None:
    jobs.start_jobs()
    pending = jobs.submit(upload("pump.md", PUMP), index=False).document
    time.sleep(0.5)
    assert jobs.document(str(pending.id)).status == "pending"
    assert jobs.index(pending.id).status in ("queued", "processing", "completed")
    assert jobs.wait(pending.id, timeout=WAIT).status == "completed"
    # Nothing left to build: refused, as cancel refuses a document with nothing to cancel (it answered
    # as if it had queued something).
    with pytest.raises(ConflictError, match=r"no pending version to queue \(completed\); re-ingest it"):
        jobs.index(pending.id)


def test_relabelling_changes_what_a_scoped_search_sees_without_re_embedding(jobs: Citeline) -> None:
    jobs.start_jobs()
    submitted = jobs.submit(upload("pump.md", PUMP), IngestOptions(scopes=("plant-a",)))
    doc = jobs.wait(submitted.document.id, timeout=WAIT)
    scoped = SearchRequest("prime the pump", filters=Filters(scopes=("plant-b",)))
    assert jobs.search(scoped) == []
    with jobs.engine.connect() as conn:
        chunk_ids = set(conn.execute(sa.text("SELECT id FROM chunks")).scalars())
    relabelled = jobs.relabel(doc.id, IngestOptions(scopes=("plant-b",)))
    assert relabelled.scopes == ["plant-b"] and relabelled.version == 1
    assert jobs.search(scoped) != []
    with jobs.engine.connect() as conn:
        assert set(conn.execute(sa.text("SELECT id FROM chunks")).scalars()) == chunk_ids


def test_bad_input_fails_once_with_its_reason_and_is_never_retried(jobs: Citeline) -> None:
    jobs.start_jobs()
    broken = jobs.submit(Upload("manual.pdf", io.BytesIO(b"%PDF-1.7 this is not really a pdf")))
    done = jobs.wait(broken.document.id, timeout=WAIT)
    assert done.status == "failed" and done.attempts == 1
    assert done.error and "manual.pdf" in done.error and done.file_path is None
    # It keeps no original, so it says it cannot be re-ingested (the admin page offers no button) and
    # a re-ingest asks for the file again.
    assert done.as_dict()["reingestable"] is False
    with pytest.raises(ConflictError, match="has no stored original to re-ingest; upload it again"):
        jobs.reingest(done.id)
    # Nor does queueing it again advise a re-ingest that would be refused.
    with pytest.raises(ConflictError, match="upload it again") as refused:
        jobs.index(done.id)
    assert "re-ingest" not in str(refused.value)


def test_uploads_over_the_size_limit_or_of_unknown_types_are_refused_before_anything_is_stored(
    settings: Settings,
) -> None:
    with configured(settings, upload_max_bytes=100) as cl:
        with pytest.raises(LimitExceededError, match="CITELINE_UPLOAD_MAX_BYTES"):
            cl.submit(upload("pump.md", PUMP))
        with pytest.raises(UnsupportedTypeError, match=r"\.docx"):
            cl.submit(upload("pump.docx", "x"))
        assert cl.documents() == []
        assert not [p for p in cl.files_dir.rglob("*") if p.is_file()]


def test_a_document_over_the_page_limit_fails_with_the_limit_named(settings: Settings) -> None:
    with configured(settings, upload_max_pages=3) as cl:
        cl.start_jobs()
        pdf = PDFS / "multicol_federal_register_2020-17221.pdf"
        done = cl.wait(cl.submit(Upload(pdf.name, pdf.open("rb"))).document.id, timeout=WAIT)
    assert done.status == "failed" and done.error and "CITELINE_UPLOAD_MAX_PAGES" in done.error


@pytest.mark.parametrize(
    ("pages", "error"), [(5, "has more than 3 pages (CITELINE_UPLOAD_MAX_PAGES)"), (3, NO_TEXT_LAYER)]
)
def test_a_pdf_over_the_page_limit_fails_on_the_limit_whatever_its_pages_hold(
    settings: Settings, tmp_path: Path, pages: int, error: str
) -> None:
    # A 5,000-page blank PDF failed as "no text layer (scanned?)", and only after its loader had read
    # every page looking for text: the limit was asked between pages given out, and a PDF with text on
    # page 1 and 3,000 blank ones did hit it. A PDF's page count is known before any page is read.
    path = tmp_path / "blank.pdf"
    writer = pypdf.PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(612, 792)
    writer.write(path)
    with configured(settings, upload_max_pages=3) as cl:
        cl.start_jobs()
        done = cl.wait(cl.submit(Upload(path.name, path.open("rb"))).document.id, timeout=WAIT)
    assert done.status == "failed" and done.error and error in done.error  # as many as the limit pass it


def test_a_transient_failure_is_retried_with_backoff_until_it_succeeds(settings: Settings) -> None:
    model = f"faulty:2-{uuid.uuid4().hex[:8]}"
    with configured(settings, embedding_model=model, job_retries=3) as cl:
        cl.start_jobs()
        done = cl.wait(cl.submit(upload("pump.md", PUMP)).document.id, timeout=WAIT)
    assert done.status == "completed" and done.attempts == 3 and done.error is None


def test_retries_are_bounded_and_the_last_reason_is_kept(settings: Settings) -> None:
    model = f"faulty:9-{uuid.uuid4().hex[:8]}"
    with configured(settings, embedding_model=model, job_retries=1) as cl:
        cl.start_jobs()
        done = cl.wait(cl.submit(upload("pump.md", PUMP)).document.id, timeout=WAIT)
    assert done.status == "failed" and done.attempts == 2
    assert done.error and "timed out" in done.error and "gave up after 2 attempts" in done.error


@pytest.fixture
def outage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A file that, while it exists, makes the vector store of every store opened after this unreachable."""
    down = tmp_path / "store-down"
    monkeypatch.setattr(citeline.engine, "open_index", lambda s: UnreachableStore(down, s))
    return down


def test_a_build_the_vector_store_failed_keeps_its_original_and_is_built_again_once_it_is_back(
    settings: Settings, outage: Path
) -> None:
    # The store being down is no fault of the document: what was uploaded stays, to be built from.
    outage.touch()
    with configured(settings, job_retries=1) as cl:
        cl.start_jobs()
        pump = cl.wait(cl.submit(upload("pump.md", PUMP)).document.id, timeout=WAIT)
        other = cl.wait(cl.submit(upload("other.md", PUMP + "\n\nUnit 7.")).document.id, timeout=WAIT)
        for failed in (pump, other):
            assert failed.status == "failed" and failed.attempts == 2
            assert (
                failed.error
                and "failed to add" in failed.error
                and "gave up after 2 attempts" in failed.error
            )
            assert failed.file_path and Path(failed.file_path).is_file()
            assert failed.as_dict()["reingestable"] is True
        outage.unlink()
        again = cl.reingest(pump.id)
        assert again.created
        built = cl.wait(pump.id, timeout=WAIT)
        assert built.status == "completed" and built.version == 2 and built.vector_count > 0
        assert [d.id for d in cl.index_all("failed")] == [other.id]
        assert cl.wait(other.id, timeout=WAIT).status == "completed"
        [hit, *_] = cl.search("how do I prime the pump?")
        assert hit.document_id in (pump.id, other.id)
        assert cl.unused_files(older_than=0) == []
        for doc in (pump, other):
            cl.delete(str(doc.id))


def test_a_bad_file_leaves_no_bytes_behind_even_while_the_vector_store_is_down(
    settings: Settings, outage: Path
) -> None:
    outage.touch()
    with configured(settings, job_retries=1) as cl:
        cl.start_jobs()
        broken = cl.submit(Upload("manual.pdf", io.BytesIO(b"%PDF-1.7 this is not really a pdf"))).document
        assert broken.file_path
        done = cl.wait(broken.id, timeout=WAIT)
        assert done.status == "failed" and done.attempts == 1 and done.file_path is None
        assert not Path(broken.file_path).exists()
        # An original kept by a build the store failed goes once a bad file replaces that failure.
        kept = cl.wait(cl.submit(upload("pump.md", PUMP)).document.id, timeout=WAIT)
        assert kept.status == "failed" and kept.file_path and Path(kept.file_path).is_file()
        empty = cl.submit(upload("pump.md", ""), document_id=kept.id).document
        assert cl.wait(empty.id, timeout=WAIT).version == 2
        assert [v.status for v in cl.versions(kept.id)] == ["failed"]
        assert not Path(kept.file_path).exists()
        assert cl.unused_files(older_than=0) == []


def test_a_queued_job_can_be_cancelled(jobs: Citeline) -> None:
    queued = jobs.submit(upload("pump.md", PUMP)).document
    cancelled = jobs.cancel(queued.id)
    assert cancelled.status == "failed" and cancelled.error == "cancelled"
    with pytest.raises(ConflictError):
        jobs.cancel(queued.id)


def test_cancelling_a_build_not_started_removes_the_original_no_other_version_holds(jobs: Citeline) -> None:
    # No runner: every version stays pending or queued. A cancelled version keeps no original (as a
    # failed build keeps none), so its bytes go at once, unless another version holds the same ones.
    held = jobs.submit(upload("held.md", PUMP), index=False).document
    copy = jobs.submit(upload("copy.md", PUMP)).document
    lone = jobs.submit(upload("lone.md", PUMP + "\n\nUnit 7."), index=False).document
    assert held.file_path and held.file_path == copy.file_path and lone.file_path
    cancelled = jobs.cancel(lone.id)
    assert cancelled.file_path is None and not Path(lone.file_path).exists()
    assert cancelled.as_dict()["reingestable"] is False
    with pytest.raises(ConflictError, match="upload it again"):
        jobs.reingest(lone.id)
    jobs.cancel(held.id)
    assert Path(held.file_path).exists()  # the copy still needs it
    jobs.cancel(copy.id)
    assert not Path(copy.file_path).exists()
    for doc in (held, copy, lone):
        jobs.delete(str(doc.id))
    assert jobs.unused_files(older_than=0) == []


def test_a_running_job_can_be_cancelled_and_is_never_swapped_in(
    settings: Settings, gate: tuple[str, threading.Event]
) -> None:
    name, opened = gate
    with configured(settings, embedding_model=f"gated:{name}") as cl:
        cl.start_jobs()
        doc = cl.submit(upload("pump.md", PUMP)).document
        wait_for_status(cl, doc, "processing", timeout=30)
        assert cl.cancel(doc.id).status == "processing"  # asked to stop
        opened.set()
        done = cl.wait(doc.id, timeout=WAIT)
        assert done.status == "failed" and done.error and "cancelled" in done.error
        assert cl.search("prime the pump") == []
        with cl.engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM chunks")).scalar_one() == 0


def being_built(cl: Citeline) -> DocumentInfo:
    """The pump manual, submitted to the runner started here and waited for until its build runs (held
    there by a gated embedder)."""
    cl.start_jobs()
    doc = cl.submit(upload("pump.md", PUMP)).document
    wait_for_status(cl, doc, "processing", timeout=30)
    return doc


def test_a_document_deleted_while_it_is_built_stops_its_build_quietly(
    settings: Settings, gate: tuple[str, threading.Event], caplog: pytest.LogCaptureFixture
) -> None:
    """An admin deletes a document whose version a runner is building: the delete holds, the build
    stops without an ERROR and a stack trace (its chunks met a foreign key to a deleted row, and
    recording the failure raised NotFoundError), and the runner goes on with the next document."""
    name, opened = gate
    with configured(settings, embedding_model=f"gated:{name}") as cl:
        doc = being_built(cl)
        with caplog.at_level(logging.INFO, logger="citeline"):
            cl.delete(str(doc.id))
            opened.set()
            after = cl.submit(upload("valve.md", PUMP.replace("pump", "valve")))
            assert cl.wait(after.document.id, timeout=WAIT).status == "completed"
        with pytest.raises(NotFoundError):
            cl.document(str(doc.id))
        with cl.engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(DISTINCT document_id) FROM chunks")).scalar_one() == 1
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]
    assert any("deleted while it was built" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("retries", [3, 0], ids=["to-be-retried", "given-up"])
def test_a_build_failing_after_its_document_was_deleted_stops_quietly(
    settings: Settings, gate: tuple[str, threading.Event], caplog: pytest.LogCaptureFixture, retries: int
) -> None:
    """A build whose document is deleted and which then fails (its original went with the delete, its
    provider went away) has no version to requeue, or to record the failure on when its retries are
    spent: either raised NotFoundError, which the runner logged as an ERROR with a stack trace (and a
    full tests/jobs run met now and then in the test above). It stops as deleted."""
    name, opened = gate
    with configured(settings, embedding_model=f"gatedfail:{name}", job_retries=retries) as cl:
        doc = being_built(cl)
        with caplog.at_level(logging.INFO, logger="citeline"):
            cl.delete(str(doc.id))
            opened.set()
            deadline = time.monotonic() + 30
            while not any("deleted while it was built" in r.getMessage() for r in caplog.records):
                assert time.monotonic() < deadline, [r.getMessage() for r in caplog.records]
                time.sleep(0.05)
        with pytest.raises(NotFoundError):
            cl.document(str(doc.id))
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]


def test_a_job_over_its_soft_time_limit_fails_with_the_limit_named(settings: Settings) -> None:
    with configured(settings, job_soft_time_limit=0.001) as cl:
        cl.start_jobs()
        pdf = PDFS / "multicol_federal_register_2020-17221.pdf"
        done = cl.wait(cl.submit(Upload(pdf.name, pdf.open("rb"))).document.id, timeout=WAIT)
    assert done.status == "failed" and done.error and "CITELINE_JOB_SOFT_TIME_LIMIT" in done.error


def test_a_one_page_build_stops_at_its_soft_time_limit_between_chunks(
    settings: Settings, gate: tuple[str, threading.Event]
) -> None:
    """A text file is one page, and the limit was asked only before each page: a build held past it
    (here by an embedder that waits for its gate, as a slow model or a huge text would) ran on to the
    end. It now stops at the first chunk past the limit and fails with the limit named."""
    name, opened = gate
    text = "".join(f"Step {i}: open relief valve {i} until the gauge reads {i} bar.\n" for i in range(6000))
    with configured(settings, embedding_model=f"gated:{name}", job_soft_time_limit=2.0) as cl:
        cl.start_jobs()
        doc = cl.submit(upload("steps.txt", text)).document
        threading.Timer(4.0, opened.set).start()  # the first batch's embedding ends past the limit
        done = cl.wait(doc.id, timeout=WAIT)
    assert done.status == "failed" and done.error and "CITELINE_JOB_SOFT_TIME_LIMIT" in done.error


def test_a_one_page_document_at_the_page_limit_is_built(settings: Settings) -> None:
    """Asked between the chunks of a page, the page limit counts the pages before it: a one-page
    document under a one-page limit is built whole."""
    with configured(settings, upload_max_pages=1) as cl:
        cl.start_jobs()
        done = cl.wait(cl.submit(upload("pump.md", PUMP)).document.id, timeout=WAIT)
    assert done.status == "completed" and done.vector_count > 1


def test_a_job_over_its_hard_time_limit_is_failed_and_its_work_discarded(
    settings: Settings, gate: tuple[str, threading.Event]
) -> None:
    name, opened = gate
    with configured(settings, embedding_model=f"gated:{name}", job_hard_time_limit=0.5) as cl:
        cl.start_jobs()
        doc = cl.submit(upload("pump.md", PUMP)).document
        deadline = time.monotonic() + 30
        while cl.document(str(doc.id)).status != "failed" and time.monotonic() < deadline:
            time.sleep(0.05)
        failed = cl.document(str(doc.id))
        assert failed.status == "failed" and failed.error and "CITELINE_JOB_HARD_TIME_LIMIT" in failed.error
        assert doc.file_path and not Path(doc.file_path).exists()  # a failed version keeps no original
        opened.set()  # the stuck build ends now; what it made must not be swapped in
        time.sleep(1.0)
        assert cl.wait(doc.id, timeout=WAIT).status == "failed" and cl.search("prime the pump") == []


def test_a_job_whose_runner_died_is_taken_up_again(jobs: Citeline) -> None:
    doc = jobs.submit(upload("pump.md", PUMP)).document
    # A runner claims the job and dies: its connection (and the run lock it held) goes away.
    with jobs.engine.connect() as dying:
        run = catalog.hold_run(dying)
        dying.commit()
        [claimed] = catalog.claim_jobs(dying, run=run, limit=1)
        dying.commit()
        assert claimed.status == "processing"
        dying.invalidate()
    jobs.start_jobs()
    done = jobs.wait(doc.id, timeout=WAIT)
    assert done.status == "completed" and done.attempts == 2


def test_queued_jobs_are_picked_up_by_a_runner_started_later(settings: Settings) -> None:
    with configured(settings) as client:
        ids = [client.submit(upload(f"pump-{i}.md", PUMP + f"\n\nUnit {i}.")).document.id for i in range(3)]
    with configured(settings) as server:
        server.start_jobs()
        assert {server.wait(i, timeout=WAIT).status for i in ids} == {"completed"}


def test_readers_may_not_submit_or_change_documents(jobs: Citeline) -> None:
    reader = Access.reader({"plant-a"}, "k1")
    with pytest.raises(AccessDeniedError):
        jobs.submit(upload("pump.md", PUMP), access=reader)
    doc = jobs.submit(upload("pump.md", PUMP), IngestOptions(scopes=("plant-a",))).document
    for action in (jobs.cancel, jobs.reingest, jobs.index):
        with pytest.raises(AccessDeniedError):
            action(doc.id, access=reader)


def test_reingest_builds_a_new_version_from_the_stored_original(jobs: Citeline, tmp_path: Path) -> None:
    jobs.start_jobs()
    first = jobs.wait(jobs.submit(upload("pump.md", PUMP)).document.id, timeout=WAIT)
    again = jobs.reingest(first.id)
    assert again.created and again.document.status == Status.QUEUED
    done = jobs.wait(first.id, timeout=WAIT)
    assert first.as_dict()["reingestable"] is True
    assert done.version == 2 and done.status == "completed" and done.vector_count == first.vector_count


def test_index_all_queues_every_pending_document_and_reingests_completed_ones(jobs: Citeline) -> None:
    pending = [
        jobs.submit(upload(f"p{i}.md", PUMP + f"\n\nUnit {i}."), index=False).document for i in range(2)
    ]
    jobs.start_jobs()
    assert {d.id for d in jobs.index_all("pending")} == {d.id for d in pending}
    assert {jobs.wait(d.id, timeout=WAIT).status for d in pending} == {"completed"}
    again = jobs.index_all("completed")
    assert {d.version for d in again} == {2}
    assert {jobs.wait(d.id, timeout=WAIT).version for d in pending} == {2}
    # Version 1 of each is superseded now: asked for superseded documents, index_all re-ingested these
    # built ones again; asked for queued or processing ones, it queued builds under way once more.
    for status in ("superseded", "queued", "processing", "staged"):
        with pytest.raises(
            InvalidRequestError, match=f"index_all takes status pending, completed, failed, not '{status}'"
        ):
            jobs.index_all(status)
    assert {jobs.document(str(d.id)).version for d in pending} == {2}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            IngestOptions(chunk_size=1, chunk_overlap=0),
            "chunk_size .* must be 50 to 20000 characters.* got 1$",
        ),
        (IngestOptions(chunk_size=0), "got 0$"),
        (IngestOptions(chunk_size=10), "chunk_size .* got 10$"),
        (IngestOptions(chunk_size=20_001), "got 20001$"),
        (IngestOptions(chunk_size=100, chunk_overlap=100), "chunk_overlap .* below the chunk size \\(100\\)"),
    ],
)
def test_an_upload_s_chunking_is_held_to_the_settings_bounds(
    jobs: Citeline, options: IngestOptions, message: str
) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        jobs.submit(upload("pump.md", PUMP), options)
    assert jobs.documents() == []


def test_an_upload_keeps_its_original_when_a_cancel_of_the_same_bytes_removes_it_as_it_registers(
    jobs: Citeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Originals are stored by their hash: the second upload found the file stored and dropped its own
    # copy; the first document's cancel then removed the file (no version held it yet), and the second
    # document was left referring to nothing.
    first = jobs.submit(upload("pump.md", PUMP), index=False).document
    register = jobs._register

    def cancel_the_first_then_register(**fields: Any) -> Submission:
        jobs.cancel(first.id)
        assert not Path(str(first.file_path)).exists()  # the race: removed while no version held it
        return register(**fields)

    monkeypatch.setattr(jobs, "_register", cancel_the_first_then_register)
    second = jobs.submit(upload("pump-copy.md", PUMP), index=False).document
    monkeypatch.undo()

    assert second.file_path == first.file_path and Path(str(second.file_path)).read_text() == PUMP
    assert not list(Path(str(second.file_path)).parent.glob("*.part"))  # the spare copy went into place
    jobs.start_jobs()
    jobs.index(second.id)
    assert jobs.wait(second.id, timeout=WAIT).status == "completed"
