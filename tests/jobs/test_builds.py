"""The builds in progress, as one read of the catalog: every version queued or being built, whoever
started it (this process, another, a worker), within the caller's scopes; a finished build drops out,
and a failed one is listed while it is recent, with why."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from citeline.access import Access
from citeline.engine import Citeline
from citeline.errors import InvalidRequestError
from citeline.ingest import IngestOptions
from citeline.jobs.submit import Upload
from citeline.settings import Settings
from tests.conftest import write
from tests.jobs.conftest import wait_for_status
from tests.jobs.test_jobs import PUMP, WAIT, configured, upload


@pytest.fixture
def jobs(settings: Settings) -> Iterator[Citeline]:
    """A store whose job runner, once started, polls fast (torn down with its schema)."""
    with configured(settings) as cl:
        yield cl
        with cl.engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "citeline_{settings.namespace}" CASCADE'))


GAUGE = "# Pressure gauge\n\n" + "Calibrate the pressure gauge every year against the master gauge. " * 12


def test_builds_started_elsewhere_are_listed_in_queue_order_and_a_finished_one_drops_out(
    jobs: Citeline, settings: Settings, tmp_path: Path
) -> None:
    [done] = jobs.ingest([write(tmp_path / "gauge.md", GAUGE)])
    assert done.document is not None and done.document.status == "completed"
    assert jobs.builds().builds == []

    # Another process (the CLI, a second server) queues a re-ingest and a first upload; no runner runs.
    with Citeline(settings) as elsewhere:
        rebuilt = elsewhere.reingest(done.document.id).document
        fresh = elsewhere.submit(upload("pump.md", PUMP), IngestOptions(scopes=("plant-a",))).document

    page = jobs.builds()
    assert page.total == 2 and [b.version_id for b in page.builds] == [rebuilt.version_id, fresh.version_id]
    again, first = page.builds
    assert (again.document_id, again.name, again.version, again.current_version) == (
        done.document.id,
        "gauge.md",
        2,
        1,
    )
    assert again.status == "queued" and again.queued_at is not None and again.started_at is None
    assert (first.document_id, first.version, first.current_version) == (fresh.id, 1, None)
    assert first.scopes == ["plant-a"] and not first.migration and first.error is None
    assert first.as_dict()["document_id"] == str(fresh.id)

    # Cancelled, the re-ingest is no build any more; asked for, it is listed as a recent failure.
    jobs.cancel(done.document.id)
    assert [b.version_id for b in jobs.builds().builds] == [fresh.version_id]
    failed = jobs.builds(failed_within=timedelta(hours=1)).builds
    assert [(b.version_id, b.status) for b in failed] == [
        (fresh.version_id, "queued"),
        (rebuilt.version_id, "failed"),
    ]
    assert failed[1].error == "cancelled" and failed[1].finished_at is not None
    assert jobs.builds(failed_within=timedelta(0)).total == 1  # longer ago than no time at all

    # Built, the upload drops out.
    jobs.start_jobs()
    assert jobs.wait(fresh.id, timeout=WAIT).status == "completed"
    assert jobs.builds().total == 0


def test_a_scoped_reader_sees_only_the_builds_of_documents_in_its_scopes(jobs: Citeline) -> None:
    plant_a = jobs.submit(upload("a.md", PUMP), IngestOptions(scopes=("plant-a",))).document
    jobs.submit(upload("b.md", PUMP + " b"), IngestOptions(scopes=("plant-b",)))
    universal = jobs.submit(upload("u.md", PUMP + " u")).document

    seen = jobs.builds(access=Access.reader({"plant-a"}))
    assert {b.document_id for b in seen.builds} == {plant_a.id, universal.id} and seen.total == 2
    assert jobs.builds(access=Access.reader(set())).total == 1  # universal only
    assert jobs.builds().total == 3


def test_builds_are_paged_with_their_total(jobs: Citeline) -> None:
    queued = [jobs.submit(upload(f"{n}.md", f"{PUMP} {n}")).document.version_id for n in range(3)]
    assert [b.version_id for b in jobs.builds(limit=2).builds] == queued[:2]
    last = jobs.builds(limit=2, offset=2)
    assert [b.version_id for b in last.builds] == queued[2:] and last.total == 3
    past = jobs.builds(limit=2, offset=5)
    assert past.builds == [] and past.total == 3
    with pytest.raises(InvalidRequestError, match="failed_within"):
        jobs.builds(failed_within=timedelta(seconds=-1))


def test_a_running_build_is_listed_first_with_when_it_started(
    settings: Settings, gate: tuple[str, threading.Event]
) -> None:
    name, opened = gate
    with configured(settings, embedding_model=f"gated:{name}") as cl:
        cl.start_jobs()
        doc = cl.submit(Upload("pump.md", io.BytesIO(PUMP.encode()))).document
        wait_for_status(cl, doc, "processing", timeout=30)
        [running] = cl.builds().builds
        assert running.status == "processing" and running.started_at is not None
        assert running.attempts == 1 and not running.cancel_requested
        cl.cancel(doc.id)
        assert cl.builds().builds[0].cancel_requested
        opened.set()
        assert cl.wait(doc.id, timeout=WAIT).status == "failed"
        assert cl.builds().total == 0


def test_listing_builds_reads_only_the_unfinished_and_failed_versions_not_the_whole_catalog(
    jobs: Citeline,
) -> None:
    # The admin page lists builds every 5 seconds while it is open: on a catalog of a million versions
    # a scan of the table each time would cost seconds. With the planner told not to scan, the statement
    # can only be answered through the partial indexes of migration 0018.
    statements: list[str] = []

    def keep(conn: object, cursor: object, statement: str, *args: object) -> None:
        if "FROM documents d" in statement and "'processing'" in statement:
            statements.append(statement)

    sa.event.listen(jobs.engine, "before_cursor_execute", keep)
    try:
        jobs.builds(failed_within=timedelta(hours=1))
    finally:
        sa.event.remove(jobs.engine, "before_cursor_execute", keep)
    (statement,) = statements

    with jobs.engine.begin() as conn:
        conn.execute(sa.text(f"SET LOCAL search_path TO citeline_{jobs.settings.namespace}"))
        conn.execute(sa.text("SET LOCAL enable_seqscan = off"))
        plan = "\n".join(
            row[0]
            for row in conn.exec_driver_sql(
                "EXPLAIN "
                + statement.replace("%(b_failed)s", "3600")
                .replace("%(b_limit)s", "NULL")
                .replace("%(b_offset)s", "0")
            )
        )

    assert "documents_unfinished" in plan and "documents_failed" in plan, plan
    assert "Seq Scan on documents" not in plan, plan
