"""``GET /builds``: the versions queued or being built, whoever started them, as far as the key sees,
against a real ``citeline serve`` whose jobs go to a real Redis with no worker reading it (a build stays
``queued`` until it is cancelled)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import (
    NAMESPACE,
    Server,
    base_env,
    cli,
    create_key,
    ingest,
    start_server,
    stop_server,
)
from tests.conftest import write


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, fresh_data_dir: Callable[[str], Path], redis_server: str
) -> Iterator[Server]:
    data = fresh_data_dir("citeline-builds-")
    corpus = tmp_path_factory.mktemp("builds-corpus")
    write(corpus / "acme" / "acme-valve.md", "# ACME valve\n\nThe ACME relief valve opens at 6 bar.")
    write(corpus / "globex" / "globex-boiler.md", "# Globex boiler\n\nThe Globex boiler runs at 12 bar.")
    env = base_env(data)
    acme = ingest(env, corpus / "acme", "--scope", "acme")
    globex = ingest(env, corpus / "globex", "--scope", "globex")
    served = base_env(data, CITELINE_JOB_RUNNER="celery", CITELINE_REDIS_URL=redis_server)
    started = start_server(served, tmp_path_factory.mktemp("builds-log") / "serve.log")
    try:
        started.keys["admin"] = create_key(served, "--role", "admin")["key"]
        started.keys["reader"] = create_key(served, "--role", "reader", "--scope", "acme")["key"]
        started.keys["other"] = create_key(served, "--role", "reader", "--scope", "globex")["key"]
        started.documents.update(acme=acme["acme-valve.md"], globex=globex["globex-boiler.md"])
        yield started
    finally:
        stop_server(started)


def test_builds_list_what_is_queued_within_the_keys_scopes_and_a_cancelled_one_drops_out(
    server: Server,
) -> None:
    acme, globex = server.documents["acme"], server.documents["globex"]
    with server.as_("admin") as admin:
        assert admin.get("/builds").json() == {"builds": [], "total": 0, "limit": 50, "offset": 0}
        assert admin.post(f"/documents/{acme}/reingest").status_code == 202
        # Started elsewhere: by the command line, in another process.
        ran = cli(server.env, "reingest", "--document-id", globex)
        assert ran.returncode == 0, ran.stderr

        listed = admin.get("/builds").json()
        assert listed["total"] == 2
        assert [(b["document_id"], b["version"], b["current_version"]) for b in listed["builds"]] == [
            (acme, 2, 1),
            (globex, 2, 1),
        ]
        first = listed["builds"][0]
        assert (first["status"], first["name"], first["scopes"]) == ("queued", "acme-valve.md", ["acme"])
        assert first["queued_at"] and first["started_at"] is None and first["error"] is None
        paged = admin.get("/builds", params={"limit": 1, "offset": 1}).json()
        assert [b["document_id"] for b in paged["builds"]] == [globex] and paged["total"] == 2

        with server.as_("reader") as reader:
            assert [b["document_id"] for b in reader.get("/builds").json()["builds"]] == [acme]
        with server.as_("other") as other:
            assert [b["document_id"] for b in other.get("/builds").json()["builds"]] == [globex]

        assert admin.post(f"/documents/{acme}/cancel").status_code == 200
        assert [b["document_id"] for b in admin.get("/builds").json()["builds"]] == [globex]
        recent = admin.get("/builds", params={"failed_within": "1h"}).json()["builds"]
        assert [(b["document_id"], b["status"], b["error"]) for b in recent] == [
            (globex, "queued", None),
            (acme, "failed", "cancelled"),
        ]
        assert recent[1]["finished_at"]
        assert admin.post(f"/documents/{globex}/cancel").status_code == 200
        assert admin.get("/builds").json()["total"] == 0


def test_a_bad_age_or_page_is_a_422_naming_the_parameter(server: Server) -> None:
    with server.as_("admin") as admin:
        soon = admin.get("/builds", params={"failed_within": "soon"})
        zero = admin.get("/builds", params={"limit": 0})
    assert soon.status_code == 422 and "query.failed_within" in soon.json()["error"]["message"]
    assert zero.status_code == 422 and "limit" in zero.json()["error"]["message"]


def test_an_upload_of_bytes_still_queued_under_another_name_names_that_document(server: Server) -> None:
    # Two copies sent one right after the other: the first is still queued (no worker reads the queue)
    # when the second comes, and the second is told all the same; a cancelled copy no longer counts.
    note = b"# Paper A\n\nThe trial enrolled 412 patients across nine sites."

    def sent(name: str) -> dict[str, Any]:
        response = admin.post("/documents", files={"file": (name, note)}, data={"scopes": "acme"})
        assert response.status_code == 202, response.text
        return dict(response.json())

    with server.as_("admin") as admin:
        first = sent("paperA.md")
        assert first["status"] == "queued" and first["same_content_as"] == []
        copy = sent("paperA (copy).md")
        assert copy["status"] == "queued"
        assert copy["same_content_as"] == [
            {"document_id": first["id"], "name": "paperA.md", "scopes": ["acme"]}
        ]
        assert admin.post(f"/documents/{first['id']}/cancel").status_code == 200
        third = sent("paperA (third).md")
        assert third["same_content_as"] == [
            {"document_id": copy["id"], "name": "paperA (copy).md", "scopes": ["acme"]}
        ]
        for made in (first, copy, third):
            assert admin.delete(f"/documents/{made['id']}").status_code == 200


def test_a_cancelled_upload_leaves_no_file_and_every_answer_says_to_upload_it_again(server: Server) -> None:
    # An upload not asked to index, cancelled: it keeps no original (as a failed build keeps none), so
    # its bytes leave the disk at once, and neither a re-ingest nor an index offers what it cannot do.
    note = b"# Cancelled note\n\nValve 88 of the cancelled-upload test is checked weekly."
    stored = Path(server.env["CITELINE_DATA_DIR"]) / "files" / NAMESPACE
    digest = hashlib.sha256(note).hexdigest()
    with server.as_("admin") as admin:
        made = admin.post("/documents", files={"file": ("cancelled.md", note)}, data={"index": "false"})
        assert made.status_code == 202, made.text
        doc = made.json()["id"]
        assert (stored / digest[:2] / f"{digest}.md").is_file()
        cancelled = admin.post(f"/documents/{doc}/cancel").json()
        assert (cancelled["status"], cancelled["error"], cancelled["reingestable"]) == (
            "failed",
            "cancelled",
            False,
        )
        assert not (stored / digest[:2] / f"{digest}.md").exists()
        reingest = admin.post(f"/documents/{doc}/reingest")
        assert reingest.status_code == 409 and reingest.json()["error"]["code"] == "conflict"
        assert "upload it again" in reingest.json()["error"]["message"]
        index = admin.post(f"/documents/{doc}/index")
        assert index.status_code == 409 and "upload it again" in index.json()["error"]["message"]
        assert "re-ingest" not in index.json()["error"]["message"]
        assert admin.delete(f"/documents/{doc}").status_code == 200


def test_search_takes_content_types_as_docs_list_shows_them_and_refuses_unknown_ones(server: Server) -> None:
    query = {"query": "relief valve opens", "top_k": 5}
    with server.as_("admin") as admin:
        stored = admin.post("/search", json={**query, "content_types": ["text/markdown"]}).json()["results"]
        short = admin.post("/search", json={**query, "content_types": ["markdown"]}).json()["results"]
        assert stored and [h["chunk_id"] for h in short] == [h["chunk_id"] for h in stored]
        assert admin.post("/search", json={**query, "content_types": ["csv"]}).json()["results"] == []
        unknown = admin.post("/search", json={**query, "content_types": ["docx"]})
    assert unknown.status_code == 422 and unknown.json()["error"]["code"] == "invalid_request"
    message = unknown.json()["error"]["message"]
    assert "'docx'" in message and "markdown" in message and "application/pdf" in message


def test_the_listing_takes_content_types_as_docs_list_shows_them_and_refuses_unknown_ones(
    server: Server,
) -> None:
    with server.as_("admin") as admin:

        def listed(content_type: str) -> list[str]:
            page = admin.get("/documents", params={"content_type": content_type, "limit": 1000}).json()
            return sorted(d["id"] for d in page["documents"])

        stored = listed("text/markdown")
        assert stored and listed("markdown") == listed("Markdown") == stored
        assert listed("pdf") == listed("csv") == []
        unknown = admin.get("/documents", params={"content_type": "docx"})
    assert unknown.status_code == 422 and unknown.json()["error"]["code"] == "invalid_request"
    message = unknown.json()["error"]["message"]
    assert message.startswith("query.content_type: unknown content type 'docx'"), message
    assert "markdown" in message and "application/pdf" in message
