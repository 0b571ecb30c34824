"""Source changes reach the index: ``citeline refresh`` and :meth:`Citeline.refresh` against a real web
server on loopback whose page changes, and real files that change or go away."""

from __future__ import annotations

import http.server
import io
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from citeline.cli import app
from citeline.engine import Citeline
from citeline.errors import ConflictError, InvalidRequestError
from citeline.ingest import IngestOptions, Outcome
from citeline.jobs.submit import Upload
from citeline.settings import Settings
from citeline.store.catalog import DocumentInfo
from citeline.store.database import schema_name
from tests.conftest import write

runner = CliRunner()
#: The tests' server is on loopback, which URL loading refuses unless allowed.
PRIVATE = {"CITELINE_URL_ALLOW_PRIVATE": "true"}


def page(body: str, *, noise: str = "") -> str:
    return (
        f"<html><head><title>Pump notes</title><script>var build = '{noise}';</script></head><body>"
        f"<nav>Home | Products {noise}</nav><article><h1>Pump notes</h1>{body}</article></body></html>"
    )


ORIGINAL = page(
    "<p>Prime the centrifugal pump by filling its casing with water until it overflows at the vent "
    "plug. A dry pump destroys its mechanical seal within seconds.</p>"
)
CHANGED = page(
    "<p>Prime the centrifugal pump with water. Since the 2024 revision, also bleed the volute through "
    "the quartzite vent screw before the first start.</p>"
)


class Site(http.server.ThreadingHTTPServer):
    """A web server on a free loopback port whose pages the test changes: ``pages[path] = (status, html)``."""

    def __init__(self) -> None:
        self.pages: dict[str, tuple[int, str]] = {}
        self.requests = 0
        super().__init__(("127.0.0.1", 0), _Handler)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{path}"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Site

    def do_GET(self) -> None:
        self.server.requests += 1
        status, html = self.server.pages.get(self.path, (404, "<p>not here</p>"))
        body = html.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Keep test output quiet."""


@pytest.fixture
def site() -> Iterator[Site]:
    server = Site()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def namespace(settings: Settings) -> Iterator[Settings]:
    """The test's namespace, dropped at the end (the CLI opens and closes it many times)."""
    yield settings
    with Citeline(settings) as cl, cl.engine.begin() as conn:
        conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema_name(settings.namespace)}" CASCADE'))


def run(settings: Settings, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = runner.invoke(
        app,
        ["--data-dir", str(settings.data_dir), "--namespace", settings.namespace, *args],
        env={**PRIVATE, **(env or {})},
    )
    return result.exit_code, result.stdout, result.stderr


def current(settings: Settings, name: str) -> tuple[int, str]:
    """A document's live version and its text."""
    with Citeline(settings) as cl:
        [doc] = [d for d in cl.documents() if d.name == name and d.is_active]
        return doc.version, " ".join(str(c["text"]) for c in cl.chunks(doc))


def test_a_changed_page_becomes_a_new_version_and_an_unchanged_one_is_a_no_op(
    namespace: Settings, site: Site
) -> None:
    site.pages["/pumps"] = (200, ORIGINAL)
    code, _, err = run(namespace, "ingest", site.url("/pumps"), "--allow-private-urls")
    assert code == 0, err
    with Citeline(namespace) as cl:
        [first] = cl.documents()
    assert first.last_fetched_at is not None

    code, out, err = run(namespace, "refresh")
    assert code == 0, err
    assert "unchanged  pumps" in out and "1 document: 1 unchanged" in err
    with Citeline(namespace) as cl:
        [again] = cl.documents()
    assert (again.version_id, again.version) == (first.version_id, 1)
    assert again.last_fetched_at is not None and again.last_fetched_at > first.last_fetched_at

    site.pages["/pumps"] = (200, CHANGED)
    code, out, err = run(namespace, "refresh")
    assert code == 0, err
    assert "updated    pumps: v2" in out and "1 document: 1 updated" in err
    version, text = current(namespace, "pumps")
    assert version == 2 and "quartzite vent screw" in text and "mechanical seal" not in text
    with Citeline(namespace) as cl:
        assert "quartzite" in cl.search("how do I bleed the volute before the first start?")[0].text
        assert [v.version for v in cl.versions(first.id)] == [2]


def test_citeline_ingest_honours_the_allow_private_setting_and_its_flag_forces_it_on(
    namespace: Settings, site: Site
) -> None:
    """The refusal says to set CITELINE_URL_ALLOW_PRIVATE=true: set, it lets ``citeline ingest`` fetch."""
    site.pages["/pumps"] = (200, ORIGINAL)
    refused = {"CITELINE_URL_ALLOW_PRIVATE": "false"}
    code, _, err = run(namespace, "ingest", site.url("/pumps"), env=refused)
    assert code == 65 and "CITELINE_URL_ALLOW_PRIVATE=true" in err
    code, _, err = run(namespace, "ingest", site.url("/pumps"))  # the setting alone
    assert code == 0 and "1 added" in err, err
    code, _, err = run(namespace, "ingest", site.url("/pumps"), "--allow-private-urls", env=refused)
    assert code == 0 and "1 unchanged" in err, err


def test_citeline_ingest_no_allow_private_urls_refuses_them_whatever_the_setting(
    namespace: Settings, site: Site
) -> None:
    """The flag's "no" form is a refusal, as the library's ``allow_private_urls=False`` is; it was read as
    "not given", so the setting let the URL in."""
    site.pages["/pumps"] = (200, ORIGINAL)
    allowed = {"CITELINE_URL_ALLOW_PRIVATE": "true"}
    code, _, err = run(namespace, "ingest", site.url("/pumps"), "--no-allow-private-urls", env=allowed)
    assert code == 65 and "CITELINE_URL_ALLOW_PRIVATE=true" in err, err


def test_the_library_s_ingest_takes_the_allow_private_setting_unless_told(cl: Citeline, site: Site) -> None:
    site.pages["/pumps"] = (200, ORIGINAL)
    [refused] = cl.ingest([site.url("/pumps")])
    assert refused.outcome is Outcome.FAILED and "CITELINE_URL_ALLOW_PRIVATE" in str(refused.error)
    with cl.derive(url_allow_private=True) as allowed:
        [result] = allowed.ingest([site.url("/pumps")])
        assert result.outcome is Outcome.ADDED, result.error
        [told] = allowed.ingest([site.url("/pumps")], allow_private_urls=False)
        assert told.outcome is Outcome.FAILED


def test_a_page_whose_markup_changes_but_not_its_text_is_unchanged(namespace: Settings, site: Site) -> None:
    site.pages["/pumps"] = (200, ORIGINAL)
    assert run(namespace, "ingest", site.url("/pumps"), "--allow-private-urls")[0] == 0
    article = ORIGINAL[ORIGINAL.index("<p>") : ORIGINAL.index("</article>")]
    site.pages["/pumps"] = (200, page(article, noise="build 2"))
    assert site.pages["/pumps"][1] != ORIGINAL
    code, out, err = run(namespace, "refresh")
    assert code == 0, err
    assert "unchanged  pumps" in out
    assert current(namespace, "pumps")[0] == 1


def test_a_page_that_cannot_be_fetched_keeps_its_current_version(namespace: Settings, site: Site) -> None:
    site.pages["/pumps"] = (200, ORIGINAL)
    assert run(namespace, "ingest", site.url("/pumps"), "--allow-private-urls")[0] == 0
    site.pages["/pumps"] = (503, "<p>down for maintenance</p>")
    code, _, err = run(namespace, "refresh")
    assert code == 65
    assert "failed" in err and "HTTP error 503" in err and "1 document: 1 failed" in err
    version, text = current(namespace, "pumps")
    assert version == 1 and "mechanical seal" in text
    with Citeline(namespace) as cl:
        assert "mechanical seal" in cl.search("what destroys the mechanical seal?")[0].text
    # The page is back: the next refresh finds it as it was.
    site.pages["/pumps"] = (200, ORIGINAL)
    code, out, err = run(namespace, "refresh")
    assert code == 0 and "unchanged  pumps" in out, err


def test_files_are_read_again_at_their_path_and_only_changed_ones_get_a_version(
    namespace: Settings, tmp_path: Path
) -> None:
    changing = write(tmp_path / "docs" / "valves.md", "# Valves\n\nThe relief valve opens at 6 bar.")
    same = write(tmp_path / "docs" / "pumps.md", "# Pumps\n\nPrime the pump with water first.")
    gone = write(tmp_path / "docs" / "fans.md", "# Fans\n\nClean the fan blades every spring.")
    assert run(namespace, "ingest", str(tmp_path / "docs"))[0] == 0
    changing.write_text("# Valves\n\nThe relief valve opens at 8 bar since the 2025 service bulletin.")
    gone.unlink()

    code, out, err = run(namespace, "refresh", "--dry-run")
    assert code == 0, err
    assert "valves.md" in out and "pumps.md" in out and "fans.md" not in out
    assert "2 documents to refresh (dry run)" in err

    code, out, err = run(namespace, "refresh")
    assert code == 0, err
    assert "updated    valves.md: v2" in out and "unchanged  pumps.md" in out and "fans.md" not in out
    assert "8 bar" in current(namespace, "valves.md")[1]
    assert current(namespace, "pumps.md")[0] == 1 and current(namespace, "fans.md")[0] == 1
    assert same.exists()


def test_older_than_picks_the_sources_read_longest_ago(namespace: Settings, tmp_path: Path) -> None:
    write(tmp_path / "old.md", "# Old\n\nRead long ago.")
    write(tmp_path / "new.md", "# New\n\nRead just now.")
    assert run(namespace, "ingest", str(tmp_path))[0] == 0
    with Citeline(namespace) as cl:
        with cl.engine.begin() as conn:
            conn.execute(
                sa.text(
                    "UPDATE documents SET last_fetched_at = now() - interval '3 days' WHERE name = 'old.md'"
                )
            )
        assert [d.name for d in cl.refresh_candidates(older_than=timedelta(days=1))] == ["old.md"]
        assert len(cl.refresh_candidates()) == 2
    code, out, err = run(namespace, "refresh", "--older-than", "2d", "--dry-run")
    assert code == 0, err
    assert "old.md" in out and "new.md" not in out
    code, _, err = run(namespace, "refresh", "--older-than", "soon")
    assert code != 0 and "e.g. 12h, 1d, 2w" in err


def test_adding_a_page_again_is_compared_by_its_text(cl: Citeline, site: Site) -> None:
    site.pages["/pumps"] = (200, ORIGINAL)
    cl = cl.derive(url_allow_private=True)
    try:
        cl.start_jobs()
        added = cl.submit_url(site.url("/pumps"))
        assert cl.wait(added.document.id).version == 1
        again = cl.submit_url(site.url("/pumps"), IngestOptions(tags=("pumps",)))
        assert again.created  # the page is fetched by its job, not here
        result = cl.refreshed(again)
        # No new version: the labels that came with it are the live version's now.
        assert result.outcome is Outcome.UNCHANGED and result.document.tags == ["pumps"]
        assert [v.version for v in cl.versions(added.document.id)] == [1]
        site.pages["/pumps"] = (200, CHANGED)
        changed = cl.refreshed(cl.refresh(added.document.id))
        assert changed.outcome is Outcome.UPDATED and changed.document.version == 2
        assert changed.document.tags == ["pumps"]
    finally:
        cl.close()


def test_a_page_whose_first_fetch_failed_keeps_its_labels_when_ingested_again(
    cl: Citeline, site: Site
) -> None:
    # A page added for one scope whose first fetch failed (not there yet, a private address not yet
    # allowed) and re-ingested once it is there was built with no labels at all: a universal document
    # that every reader key, whatever its scopes, could read.
    cl = cl.derive(url_allow_private=True)
    try:
        cl.start_jobs()
        labels = IngestOptions(
            scopes=("plant-a",), category="Plant", tags=("pumps",), metadata={"site": "north"}
        )
        added = cl.submit_url(site.url("/pumps"), labels)
        failed = cl.wait(added.document.id)
        assert failed.status == "failed" and failed.scopes == ["plant-a"]
        site.pages["/pumps"] = (200, ORIGINAL)
        again = cl.reingest(added.document.id)
        assert again.document.scopes == ["plant-a"]
        done = cl.wait(added.document.id)
        assert done.status == "completed" and done.scopes == ["plant-a"]
        assert (done.category, done.tags, done.metadata) == ("Plant", ["pumps"], {"site": "north"})
    finally:
        cl.close()


def test_an_uploaded_document_has_no_origin_to_refresh(cl: Citeline, tmp_path: Path) -> None:
    path = write(tmp_path / "notes.md", "# Notes\n\nUploaded, not read from a path.")
    with path.open("rb") as fh:
        submitted = cl.submit(Upload("notes.md", fh))
    cl.start_jobs()
    cl.wait(submitted.document.id)
    assert cl.refresh_candidates() == []
    with pytest.raises(InvalidRequestError, match="no origin to read again"):
        cl.refresh(submitted.document.id)


def test_with_celery_workers_pages_are_queued_and_files_read_here(
    namespace: Settings, site: Site, tmp_path: Path
) -> None:
    site.pages["/pumps"] = (200, ORIGINAL)
    assert run(namespace, "ingest", site.url("/pumps"), "--allow-private-urls")[0] == 0
    assert run(namespace, "ingest", str(write(tmp_path / "valves.md", "# Valves\n\nOpens at 6 bar.")))[0] == 0
    # A broker nobody listens on: the page's job waits in the catalog for workers to come.
    celery = {"CITELINE_JOB_RUNNER": "celery", "CITELINE_REDIS_URL": "redis://127.0.0.1:9/0"}
    requests = site.requests
    code, out, err = run(namespace, "refresh", env=celery)
    assert code == 0, err
    assert "queued     pumps" in out and "unchanged  valves.md" in out
    assert site.requests == requests  # the page is fetched by the worker, not by the command
    with Citeline(namespace) as cl:
        [page_doc] = [d for d in cl.documents() if d.name == "pumps" and d.is_active]
        assert [(v.version, v.status) for v in cl.versions(page_doc.id)] == [(1, "completed"), (2, "queued")]


def ingested(cl: Citeline, path: Path) -> DocumentInfo:
    """``path`` ingested from its path (a file document), as the catalog holds it."""
    [result] = cl.ingest([path])
    assert result.document is not None, result.error
    return result.document


def test_an_upload_replacing_a_file_document_takes_it_off_its_old_path(cl: Citeline, tmp_path: Path) -> None:
    note = write(tmp_path / "note.md", "# Note\n\nThe relief valve opens at 6 bar.")
    doc = ingested(cl, note)
    cl.start_jobs()
    upload = Upload("note2.md", io.BytesIO(b"# Note\n\nThe relief valve opens at 9 bar now."))
    submitted = cl.submit(upload, document_id=doc.id)
    assert submitted.created and submitted.document.source_uri == f"upload:{doc.id}"
    done = cl.wait(doc.id)
    assert (done.id, done.version, done.status) == (doc.id, 2, "completed")
    assert done.last_fetched_at is None  # an upload was never read at an origin
    # note.md is still at its path, unchanged: refresh must not read it back over the upload.
    assert note.exists() and cl.refresh_candidates() == []
    with pytest.raises(InvalidRequestError, match="no origin to read again"):
        cl.refresh(doc.id)
    [live] = cl.versions(doc.id)
    assert live.version == 2 and "9 bar" in " ".join(str(c["text"]) for c in cl.chunks(live))
    # The path is no longer this document's source: ingesting it again adds a document of its own.
    [again] = cl.ingest([note])
    assert again.outcome is Outcome.ADDED and again.document is not None and again.document.id != doc.id


def test_the_refresh_command_leaves_an_upload_replacement_alone(namespace: Settings, tmp_path: Path) -> None:
    note = write(tmp_path / "note.md", "# Note\n\nThe relief valve opens at 6 bar.")
    assert run(namespace, "ingest", str(note))[0] == 0
    with Citeline(namespace) as cl:
        [doc] = cl.documents()
        cl.start_jobs()
        upload = Upload("note2.md", io.BytesIO(b"# Note\n\nThe relief valve opens at 9 bar now."))
        cl.submit(upload, document_id=doc.id)
        assert cl.wait(doc.id).version == 2
    code, out, err = run(namespace, "refresh")
    assert code == 0, err
    assert "0 documents: nothing to refresh" in err and out == ""
    # Named, it is not "would refresh": the dry run says why the real run would refuse it.
    code, out, err = run(namespace, "refresh", "--dry-run", "--document-id", str(doc.id))
    assert code == 0, err
    assert f"cannot refresh {str(doc.id)[:8]} note2.md: it was uploaded" in out
    assert "would refresh" not in out and "0 documents to refresh (dry run)" in err
    version, text = current(namespace, "note2.md")
    assert version == 2 and "9 bar" in text and "6 bar" not in text


def test_a_web_page_replacing_a_file_document_becomes_its_origin(
    cl: Citeline, site: Site, tmp_path: Path
) -> None:
    doc = ingested(cl, write(tmp_path / "pumps.md", "# Pumps\n\nPrime the pump with water first."))
    site.pages["/pumps"] = (200, ORIGINAL)
    cl = cl.derive(url_allow_private=True)
    try:
        cl.start_jobs()
        submitted = cl.submit_url(site.url("/pumps"), document_id=doc.id)
        assert submitted.document.source_uri == site.url("/pumps")
        done = cl.wait(doc.id)
        assert (done.version, done.source_uri) == (2, site.url("/pumps"))
        assert "mechanical seal" in " ".join(str(c["text"]) for c in cl.chunks(done))
        assert [d.id for d in cl.refresh_candidates()] == [doc.id]
        site.pages["/pumps"] = (200, CHANGED)
        changed = cl.refreshed(cl.refresh(doc.id))
        assert changed.outcome is Outcome.UPDATED and changed.document.version == 3
    finally:
        cl.close()


def test_a_replacement_from_elsewhere_waits_for_the_version_built_from_the_origin(
    cl: Citeline, tmp_path: Path
) -> None:
    note = write(tmp_path / "note.md", "# Note\n\nThe relief valve opens at 6 bar.")
    doc = ingested(cl, note)
    note.write_text("# Note\n\nThe relief valve opens at 7 bar.")
    # No runner started: the changed file's version stays queued, and would be swapped in after the upload.
    assert cl.refresh(doc.id).document.status == "queued"
    with pytest.raises(ConflictError, match="version 2 queued"):
        cl.submit(Upload("note2.md", io.BytesIO(b"# Note\n\nNine bar.")), document_id=doc.id)
    assert [(v.version, v.source_uri) for v in cl.versions(doc.id)] == [
        (1, doc.source_uri),
        (2, doc.source_uri),
    ]


def test_a_document_cannot_take_another_document_s_web_page(cl: Citeline, site: Site, tmp_path: Path) -> None:
    site.pages["/pumps"] = (200, ORIGINAL)
    file_doc = ingested(cl, write(tmp_path / "a.md", "# A\n\nAlpha valves."))
    [page_result] = cl.ingest([site.url("/pumps")], allow_private_urls=True)
    assert page_result.document is not None, page_result.error
    with pytest.raises(ConflictError, match=f"already document {page_result.document.id}"):
        cl.submit_url(site.url("/pumps"), document_id=file_doc.id)
    assert [v.source_uri for v in cl.versions(file_doc.id)] == [file_doc.source_uri]
