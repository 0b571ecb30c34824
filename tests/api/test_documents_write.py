"""Changing documents over HTTP: uploads answer at once and are built in the background, replacing a
document never shows readers a mix or nothing, and a server killed mid-document recovers it."""

from __future__ import annotations

import functools
import http.server
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from citeline.engine import Citeline
from citeline.settings import Settings
from tests.api.conftest import (
    NAMESPACE,
    Server,
    add_keys,
    base_env,
    cli,
    create_key,
    launch_server,
    read_events,
    start_server,
    stop_server,
    wait_ready,
)
from tests.conftest import PDFS

FIFTEEN_PAGES = PDFS / "multicol_federal_register_2020-17221.pdf"
PUMP_V1 = "# Pump\n\n" + "The booster pump is primed with clean water before it is started. " * 20
PUMP_V2 = "# Pump\n\n" + "The booster pump is primed with glycol before it is started. " * 20


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, fresh_data_dir: Callable[[str], Path]
) -> Iterator[Server]:
    """A server of these tests' own: what they upload must not change what other tests list."""
    # Private addresses allowed: the web pages these tests add are served on loopback.
    env = base_env(
        fresh_data_dir("citeline-write-"), CITELINE_LLM="extractive", CITELINE_URL_ALLOW_PRIVATE="true"
    )
    started = start_server(env, tmp_path_factory.mktemp("write-log") / "serve.log")
    try:
        add_keys(started, env, {"reader": ["acme"], "other": ["globex"]})
        with started.as_("admin") as admin:
            revoked = admin.post("/keys", json={"role": "reader", "scopes": ["acme"]}).json()
            assert admin.delete(f"/keys/{revoked['id']}").status_code == 200
            started.keys["revoked"] = revoked["key"]
            note = upload(admin, "acme-note.md", b"# Note\n\nThe ACME valve opens at 6 bar.", scopes="acme")
            started.documents["acme_note"] = poll(admin, note.json()["id"])["id"]
        yield started
    finally:
        stop_server(started)


def poll(client: httpx.Client, document_id: str, timeout: float = 240.0) -> dict[str, Any]:
    """The document once its job has ended (or as it is after ``timeout``); one request a second, well
    within the rate limit."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        versions = client.get(f"/documents/{document_id}/versions").json()["versions"]
        if not any(v["status"] in ("pending", "queued", "processing") for v in versions):
            break
        time.sleep(1.0)
    doc: dict[str, Any] = client.get(f"/documents/{document_id}").json()
    return doc


def own_key(server: Server, role: str, *scopes: str) -> httpx.Client:
    """A client with a key of its own, so its requests count against no other test's rate limit."""
    body: dict[str, Any] = {"role": role}
    if role == "reader":
        body["scopes"] = list(scopes)
    with server.as_("admin") as admin:
        made = admin.post("/keys", json=body)
    assert made.status_code == 201, made.text
    return server.client(made.json()["key"])


def upload(client: httpx.Client, name: str, data: bytes, **fields: str) -> httpx.Response:
    return client.post("/documents", files={"file": (name, data)}, data=fields)


def test_an_upload_answers_at_once_queued_and_is_built_in_the_background(server: Server) -> None:
    pdf = FIFTEEN_PAGES.read_bytes()
    with own_key(server, "admin") as admin:
        times = []
        for _ in range(3):
            started = time.perf_counter()
            response = upload(admin, FIFTEEN_PAGES.name, pdf, scopes="acme,federal", category="regs")
            times.append((time.perf_counter() - started) * 1e3)
        print(f"\nupload of the 15-page PDF answered in {statistics.median(times):.0f} ms (median of 3)")
        assert response.status_code in (200, 202), response.text
        first = response.json()
        assert first["status"] in ("queued", "processing", "completed")
        assert response.headers["location"] == f"/documents/{first['id']}"
        done = poll(admin, first["id"])
        assert done["status"] == "completed" and done["page_count"] == 15, done
        assert done["scopes"] == ["acme", "federal"] and done["category"] == "regs"
        assert done["vector_count"] > 15 and "file_path" not in done
        hits = admin.get("/search", params={"q": "Federal Register rule", "n": 20}).json()["results"]
        # The server already holds this PDF: its passages are hits naming the upload's copies of them.
        assert first["id"] in {c["document_id"] for h in hits for c in h["also_in"]}
    with server.as_("other") as other:
        assert other.get(f"/documents/{first['id']}").status_code == 404


def test_only_admins_change_documents(server: Server) -> None:
    doc = server.documents["acme_note"]
    for who, status in (("none", 401), ("revoked", 401), ("reader", 403)):
        with server.as_(who) as client:
            assert upload(client, "x.md", b"# x\n\ntext").status_code == status
            assert client.patch(f"/documents/{doc}", json={"tags": ["x"]}).status_code == status
            assert client.post(f"/documents/{doc}/reingest").status_code == status
            assert client.post(f"/documents/{doc}/cancel").status_code == status


def test_bad_uploads_are_refused_in_the_error_shape(server: Server) -> None:
    with own_key(server, "admin") as admin:
        wrong = upload(admin, "notes.docx", b"PK\x03\x04")
        assert wrong.status_code == 415 and "docx" in wrong.json()["error"]["message"]
        json_body = admin.post("/documents", json={"url": "ftp://example.org/a.html"})
        assert json_body.status_code == 415 and json_body.json()["error"]["code"]
        neither = admin.post("/documents", content=b"raw", headers={"content-type": "text/plain"})
        assert neither.status_code == 422 and "multipart" in neither.json()["error"]["message"]
        broken = upload(admin, "broken.pdf", b"%PDF-1.7 not really a pdf")
        done = poll(admin, broken.json()["id"])
        assert done["status"] == "failed" and "broken.pdf" in done["error"] and done["attempts"] == 1


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (b'{"scopes": ["a"]}', "body.url: Field required"),
        (b"{bad", "body: Invalid JSON"),
        (b'{"url": 5}', "body.url"),
        (b"[1]", "body: Input should be an object"),
        (b'{"url": "https://example.org", "chunk_size": "x"}', "body.chunk_size"),
        (b'{"url": "https://example.org", "scope": ["a"]}', "body.scope"),
        (b'{"url": "https://example.org", "scopes": [" "]}', "body.scopes.0"),
        (b'{"url": "https://example.org", "metadata": {"year": 2024}}', "body.metadata.year"),
    ],
)
def test_a_web_page_body_that_does_not_validate_is_a_422_naming_the_field(
    server: Server, body: bytes, named: str
) -> None:
    with server.as_("admin") as admin:
        response = admin.post("/documents", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request" and named in error["message"], error


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"scope": "acme"}, "'scope'"),
        ({"scopes": " "}, "scopes"),
        ({"scopes": "acme,,globex"}, "scopes"),
        ({"metadata": '{"year": 2024}'}, "metadata.year"),
        # PostgreSQL stores no NUL character: refused by name, not a 500 from the store.
        ({"category": "plant\x00valves"}, "category"),
        ({"metadata": '{"site": "north\\u0000"}'}, "metadata.site"),
        # Read as true, a misspelt false would build a document the client meant to hold back.
        ({"index": "flase"}, "form field index: must be true or false, got 'flase'"),
        ({"chunk_size": "ten"}, "form field chunk_size: must be a whole number, got 'ten'"),
        ({"metadata": "year=2024"}, "form field metadata: must be a JSON object"),
    ],
)
def test_an_upload_with_a_field_value_it_cannot_take_is_refused_and_nothing_is_stored(
    server: Server, fields: dict[str, str], named: str
) -> None:
    with server.as_("admin") as admin:
        response = upload(admin, "refused.md", b"# Refused\n\nNever stored.", **fields)
        listed = admin.get("/documents", params={"name_contains": "refused.md"}).json()
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request" and named in error["message"], error
    assert listed["total"] == 0


def test_an_uploaded_file_name_with_a_double_quote_keeps_it(server: Server) -> None:
    # Browsers (and httpx) send a double quote in a multipart file name as %22.
    with server.as_("admin") as admin:
        made = upload(admin, '"draft" notes.md', b"# Draft\n\nThe valve opens at 6 bar.")
        assert made.status_code == 202, made.text
        assert made.json()["name"] == '"draft" notes.md'
        assert admin.delete(f"/documents/{made.json()['id']}").status_code == 200


def test_an_upload_of_bytes_already_stored_names_the_documents_holding_them(server: Server) -> None:
    note = b"# Boiler B-7\n\nThe B-7 relief valve opens at 9.5 bar and is tested every spring."
    with server.as_("admin") as admin:
        first = upload(admin, "boiler-b7.md", note, scopes="acme")
        assert first.status_code == 202, first.text
        assert first.json()["same_content_as"] == []
        poll(admin, first.json()["id"])
        # The same file for another journey: stored, and told where the same bytes already are.
        again = upload(admin, "boiler-b7 (globex).md", note, scopes="globex")
        assert again.status_code == 202, again.text
        # With its scopes: the copy, in globex, is seen by other readers than the one stored.
        assert again.json()["same_content_as"] == [
            {"document_id": first.json()["id"], "name": "boiler-b7.md", "scopes": ["acme"]}
        ]
        poll(admin, again.json()["id"])
        # An answer citing the passage names its other copy, openable, and so does the stored conversation.
        with admin.stream(
            "POST", "/chat/stream", json={"question": "When does the B-7 relief valve open?"}
        ) as r:
            events = list(read_events(r.iter_lines()))
        complete = events[-1].data
        shown = [c for c in complete["citations"] if "9.5 bar" in c["excerpt"]]
        conversation = admin.get(f"/conversations/{complete['conversation_id']}").json()
        stored = [c for m in conversation["messages"] for c in m["citations"] if "9.5 bar" in c["excerpt"]]
        for citation in (*shown, *stored):
            (copy,) = citation["also_in"]
            assert {citation["document_id"], copy["document_id"]} == {
                made.json()["id"] for made in (first, again)
            }
            assert copy["download_url"] == (
                f"/documents/{copy['document_id']}/file?version={copy['version']}#page={copy['page']}"
            )
        assert len(shown) == len(stored) == 1
        for made in (first, again):
            assert admin.delete(f"/documents/{made.json()['id']}").status_code == 200


def test_metadata_is_relabelled_as_strings_and_matched_by_a_filter(server: Server) -> None:
    doc = server.documents["acme_note"]
    with server.as_("admin") as admin:
        for labels, named in (
            ({"metadata": {"year": 2024}}, "body.metadata.year"),
            ({"scopes": [""]}, "body.scopes.0"),
            ({"scope": ["globex"]}, "body.scope"),
        ):
            response = admin.patch(f"/documents/{doc}", json=labels)
            assert response.status_code == 422, response.text
            assert named in response.json()["error"]["message"]
        assert admin.get(f"/documents/{doc}").json()["scopes"] == ["acme"]
        relabelled = admin.patch(f"/documents/{doc}", json={"metadata": {"year": "2024"}})
        assert relabelled.status_code == 200 and relabelled.json()["metadata"] == {"year": "2024"}
        query = {"query": "when does the ACME valve open", "document_ids": [doc]}
        found = admin.post("/search", json={**query, "metadata": {"year": "2024"}}).json()
        other = admin.post("/search", json={**query, "metadata": {"year": "2025"}}).json()
    assert found["count"] > 0 and other["count"] == 0


def test_an_empty_category_removes_the_category(server: Server) -> None:
    # It was a 200 that changed nothing: "" read as "not given", and no request could remove a category.
    with own_key(server, "admin") as admin:
        made = upload(admin, "category.md", PUMP_V1.encode(), category="Plant/Pumps", index="false").json()
        path = f"/documents/{made['id']}"
        assert admin.patch(path, json={"tags": ["pump"]}).json()["category"] == "Plant/Pumps"
        cleared = admin.patch(path, json={"category": ""})
        assert cleared.status_code == 200, cleared.text
        assert cleared.json()["category"] is None and cleared.json()["tags"] == ["pump"]
        assert admin.get("/documents", params={"category": "Plant"}).json()["total"] == 0
        slashes = admin.patch(path, json={"category": "/"})
        assert (
            slashes.status_code == 422 and '"" to remove the category' in slashes.json()["error"]["message"]
        )
        assert admin.delete(path).status_code == 200


def test_relabel_cancel_and_reingest(server: Server) -> None:
    with own_key(server, "admin") as admin:
        made = upload(admin, "labels.md", PUMP_V1.encode(), scopes="acme", index="false").json()
        assert made["status"] == "pending"
        relabelled = admin.patch(f"/documents/{made['id']}", json={"scopes": ["globex"], "tags": ["pump"]})
        assert relabelled.json()["scopes"] == ["globex"] and relabelled.json()["tags"] == ["pump"]
        cancelled = admin.post(f"/documents/{made['id']}/cancel").json()
        assert cancelled["status"] == "failed" and cancelled["error"] == "cancelled"
        again = admin.post(f"/documents/{made['id']}/cancel")
        assert again.status_code == 409 and again.json()["error"]["code"] == "conflict"
        queued = upload(admin, "reindex.md", PUMP_V1.encode() + b"\n\nUnit 7.").json()
        first = poll(admin, queued["id"])
        assert first["status"] == "completed" and first["version"] == 1
        redo = admin.post(f"/documents/{queued['id']}/reingest")
        assert redo.status_code == 202
        assert poll(admin, queued["id"])["version"] == 2


def test_replacing_a_document_while_readers_search_shows_one_version_or_the_other(server: Server) -> None:
    with own_key(server, "admin") as admin:
        doc = upload(admin, "pump.md", PUMP_V1.encode(), scopes="acme").json()
        assert poll(admin, doc["id"])["status"] == "completed"
    seen: list[set[str]] = []
    stop = threading.Event()

    def read() -> None:
        with own_key(server, "reader", "acme") as reader:
            while not stop.wait(0.6):
                query = {"query": "how is the booster pump primed", "document_ids": [doc["id"]], "top_k": 50}
                hits = reader.post("/search", json=query).json()["results"]
                seen.append({"v1" if "clean water" in h["text"] else "v2" for h in hits})

    reader = threading.Thread(target=read)
    reader.start()
    try:
        with own_key(server, "admin") as admin:
            replaced = upload(admin, "pump-v2.md", PUMP_V2.encode(), document_id=doc["id"]).json()
            assert replaced["id"] == doc["id"] and replaced["version"] == 2
            assert poll(admin, doc["id"])["version"] == 2
        time.sleep(0.5)
    finally:
        stop.set()
        reader.join()
    assert seen and all(s in ({"v1"}, {"v2"}) for s in seen), [s for s in seen if len(s) != 1]
    assert seen[-1] == {"v2"}


def test_a_server_killed_mid_document_builds_it_after_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = base_env(
        data,
        CITELINE_LLM="extractive",
        CITELINE_JOB_POLL_SECONDS="0.2",
        CITELINE_JOB_SOFT_TIME_LIMIT="1200",
        CITELINE_JOB_HARD_TIME_LIMIT="2400",
    )
    server = wait_ready(launch_server(env, tmp_path / "first.log"))
    key = create_key(env, "--role", "admin")["key"]
    long_text = "\n\n".join(
        f"## Section {i}\n\n" + f"Valve {i} is inspected every {i % 12 + 1} months by the engineer. " * 12
        for i in range(400)
    )
    try:
        with server.client(key) as admin:
            doc = upload(admin, "long.md", long_text.encode()).json()
            deadline = time.monotonic() + 120
            while admin.get(f"/documents/{doc['id']}").json()["status"] != "processing":
                assert time.monotonic() < deadline, "the job never started"
                time.sleep(0.05)
        server.process.kill()  # SIGKILL: no clean shutdown, the run's lock dies with its connection
        server.process.wait()
    finally:
        stop_server(server)
    restarted = wait_ready(launch_server(env, tmp_path / "second.log"))
    try:
        with restarted.client(key) as admin:
            done = poll(admin, doc["id"], timeout=600)
        assert done["status"] == "completed" and done["attempts"] == 2, done
    finally:
        stop_server(restarted)
    settings = Settings(data_dir=data, namespace=NAMESPACE)
    with Citeline(settings) as cl, cl.engine.connect() as conn:
        per_version = conn.execute(
            sa.text(
                "SELECT d.id, d.vector_count, count(c.id) FROM documents d "
                "LEFT JOIN chunks c ON c.document_id = d.id GROUP BY d.id, d.vector_count"
            )
        ).all()
        orphans = conn.execute(
            sa.text(
                "SELECT count(*) FROM chunks c LEFT JOIN documents d ON d.id = c.document_id "
                "WHERE d.id IS NULL"
            )
        ).scalar_one()
        files = sorted(p for p in cl.files_dir.rglob("*") if p.is_file())
    assert [(n, c) for _, n, c in per_version] == [(done["vector_count"], done["vector_count"])]
    assert orphans == 0 and len(files) == 1


def test_an_upload_the_vector_store_failed_is_rebuilt_from_its_original_once_the_store_is_back(
    api_data: Path, tmp_path: Path
) -> None:
    # The server's vector store is unreachable while the file `outage` exists (tests/jobs/outage_main.py).
    outage = tmp_path / "store-down"
    env = {
        **base_env(
            api_data,
            CITELINE_LLM="extractive",
            CITELINE_JOB_POLL_SECONDS="0.2",
            CITELINE_JOB_RETRIES="1",
            CITELINE_JOB_RETRY_DELAY="0.2",
            CITELINE_TEST_OUTAGE=str(outage),
        ),
        "CITELINE_NAMESPACE": "api_outage",
    }
    key = create_key(env, "--role", "admin")["key"]
    server = start_server(env, tmp_path / "serve.log", main="tests.jobs.outage_main")
    try:
        with server.client(key) as admin:
            outage.touch()
            sent = upload(admin, "pump.md", PUMP_V1.encode())
            assert sent.status_code == 202, sent.text
            failed = poll(admin, sent.json()["id"])
            assert failed["status"] == "failed" and "gave up after 2 attempts" in failed["error"], failed
            assert failed["reingestable"] is True
            assert admin.get(f"/documents/{failed['id']}/file").content == PUMP_V1.encode()
            outage.unlink()
            again = admin.post(f"/documents/{failed['id']}/reingest")
            assert again.status_code == 202, again.text
            built = poll(admin, failed["id"])
            assert built["status"] == "completed" and built["version"] == 2 and built["vector_count"] > 0
            found = admin.post("/search", json={"query": "how is the booster pump primed?"}).json()
            assert found["results"][0]["document_id"] == failed["id"]
            assert admin.delete(f"/documents/{failed['id']}").status_code == 200
    finally:
        stop_server(server)


def test_refresh_reads_a_changed_file_again_and_reports_each_document(server: Server, tmp_path: Path) -> None:
    path = tmp_path / "refresh-pump.md"
    path.write_text(PUMP_V1)
    done = cli(server.env, "ingest", str(path))
    assert done.returncode == 0, done.stderr
    with server.as_("reader") as reader:
        assert reader.post("/refresh", json={"dry_run": True}).status_code == 403
    with server.as_("admin") as admin:
        listed = admin.post("/refresh", json={"dry_run": True})
        assert listed.status_code == 202, listed.text
        [mine] = [d for d in listed.json()["documents"] if d["name"] == "refresh-pump.md"]
        assert mine["refresh_problem"] is None
        same = admin.post("/refresh", json={"document_ids": [mine["id"]]})
        assert same.status_code == 202, same.text
        [unchanged] = same.json()["documents"]
        assert (unchanged["name"], unchanged["outcome"]) == ("refresh-pump.md", "unchanged")
        path.write_text(PUMP_V2)
        [changed] = admin.post("/refresh", json={"document_ids": [mine["id"]]}).json()["documents"]
        assert changed["outcome"] in ("queued", "processing", "updated")
        assert poll(admin, mine["id"])["version"] == 2
        assert admin.post("/refresh", json={"older_than": "soon"}).status_code == 422
        # Empty is no age: refused too, not a refresh of everything (as the CLI's --older-than "").
        empty = admin.post("/refresh", json={"older_than": "", "dry_run": True})
        assert empty.status_code == 422 and "an age is a number and a unit" in empty.text
        # A named document whose original is gone: the dry run says why a refresh would refuse it.
        path.unlink()
        dry = admin.post("/refresh", json={"dry_run": True, "document_ids": [mine["id"]]})
        [gone] = dry.json()["documents"]
        assert gone["refresh_problem"] == f"its original {path} is no longer there"


def test_an_upload_records_the_key_that_made_it(server: Server) -> None:
    with server.as_("admin") as admin:
        made = admin.post("/keys", json={"role": "admin", "name": "ward-7 uploads"}).json()
    with server.client(made["key"]) as uploader:
        sent = upload(uploader, "ward-7.md", b"# Ward 7\n\nVisiting hours are 14:00 to 18:00.", scopes="acme")
        page = uploader.post("/documents", json={"url": "http://127.0.0.1:9/ward-7.html", "index": False})
        for response in (sent, page):
            assert response.status_code == 202, response.text
            # Keys are named freely and renamed; the key's id says which key it was.
            assert response.json()["uploaded_by"] == f"key:{made['id']}"
            assert uploader.delete(f"/documents/{response.json()['id']}").status_code == 200


@pytest.fixture
def site(tmp_path: Path) -> Iterator[str]:
    """A web server on loopback serving ``tmp_path`` (``python -m http.server``), as its base URL."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as httpd:
        thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{httpd.server_address[1]}"
        finally:
            httpd.shutdown()
            thread.join()


def test_every_link_to_a_cited_web_page_opens_what_was_cited(
    server: Server, site: str, tmp_path: Path
) -> None:
    """citeline keeps no copy of a web page: its hits and citations link the page's text as citeline
    keeps it (of the version cited), and give the page's address on its own."""
    (tmp_path / "sump.html").write_text(
        "<html><head><title>Sump pump</title></head><body><h1>Sump pump S-40</h1>"
        "<p>The S-40 sump pump starts when the water reaches 30 cm and stops at 10 cm.</p></body></html>"
    )
    address = f"{site}/sump.html"
    with own_key(server, "admin") as admin:
        added = admin.post("/documents", json={"url": address})
        assert added.status_code == 202, added.text
        doc = poll(admin, added.json()["id"])
        assert doc["status"] == "completed", doc
        # Built again: version 2, so a link pinned to the cited version is told apart from the current.
        assert admin.post(f"/documents/{doc['id']}/reingest").status_code == 202
        doc = poll(admin, doc["id"])
        assert doc["version"] == 2 and doc["file_url"] is None

        found = admin.post(
            "/search", json={"query": "S-40 sump pump water level", "document_ids": [doc["id"]]}
        )
        hit = found.json()["results"][0]
        with admin.stream(
            "POST", "/chat/stream", json={"question": "When does the S-40 sump pump start?"}
        ) as r:
            events = list(read_events(r.iter_lines()))
        complete = events[-1].data
        assert events[-1].name == "complete", events[-1]
        [evidence] = [e.data for e in events if e.name == "evidence"]
        passages = [p for p in evidence["passages"] if p["document_id"] == doc["id"]]
        cited = [c for c in complete["citations"] if c["document_id"] == doc["id"]]
        conversation = admin.get(f"/conversations/{complete['conversation_id']}").json()
        stored = [
            c for m in conversation["messages"] for c in m["citations"] if c["document_id"] == doc["id"]
        ]
        assert passages and cited and stored

        assert hit["url"] == f"/documents/{doc['id']}/pages/{hit['page']}"
        assert hit["source_url"] == address
        for passage in (*passages, *cited, *stored):
            assert passage["download_url"] == f"/documents/{doc['id']}/pages/{passage['page']}?version=2"
            assert passage["source_url"] == address
        for link in {hit["url"], *(p["download_url"] for p in (*passages, *cited, *stored))}:
            opened = admin.get(link)
            assert opened.status_code == 200, (link, opened.text)
            assert "30 cm" in opened.json()["text"]
        assert admin.delete(f"/documents/{doc['id']}").status_code == 200


def test_a_csv_passage_names_its_rows_of_the_file_wherever_it_is_given(server: Server) -> None:
    """A character span on "page 1" finds nothing in a spreadsheet: every hit, chunk, passage and
    citation of a CSV says which rows of the file it holds, as a spreadsheet numbers them (the header
    is row 1, the blank line row 3); those of other documents say null."""
    csv = b"drug,dose\nmetformin,500 mg twice daily\n\nsitagliptin,100 mg once daily\n"
    with own_key(server, "admin") as admin:
        added = upload(admin, "doses.csv", csv, category="formulary")
        assert added.status_code in (200, 202), added.text
        doc = poll(admin, added.json()["id"])
        assert doc["status"] == "completed", doc
        try:
            found = admin.post(
                "/search", json={"query": "sitagliptin dose", "document_ids": [doc["id"]], "n_results": 1}
            )
            [hit] = found.json()["results"]
            chunks = admin.get(f"/documents/{doc['id']}/chunks").json()["chunks"]
            note = admin.get("/search", params={"q": "ACME valve opens", "n": 1}).json()["results"]
            with admin.stream(
                "POST",
                "/chat/stream",
                json={"question": "What is the dose of sitagliptin?", "document_ids": [doc["id"]]},
            ) as r:
                events = list(read_events(r.iter_lines()))
            complete = events[-1].data
            assert events[-1].name == "complete", events[-1]
            [evidence] = [e.data for e in events if e.name == "evidence"]
            conversation = admin.get(f"/conversations/{complete['conversation_id']}").json()
            stored = [c for m in conversation["messages"] for c in m["citations"]]

            assert "sitagliptin" in hit["text"] and hit["rows"] == [4, 4]
            assert [c["rows"] for c in chunks] == [[2, 2], [4, 4]]
            assert note[0]["rows"] is None
            rows = {c["chunk_id"]: c["rows"] for c in chunks}
            given = [e.data["passage"] for e in events if e.name == "citation" and e.data["passage"]]
            assert complete["citations"] and stored and evidence["passages"] and given
            for passage in (*evidence["passages"], *given, *complete["citations"], *stored):
                assert passage["rows"] == rows[passage["chunk_id"]], passage
        finally:
            assert admin.delete(f"/documents/{doc['id']}").status_code == 200


def test_a_stored_original_is_served_sandboxed_and_never_sniffed(server: Server) -> None:
    """An uploaded HTML page is served inline on the API's origin, where a script in it would run with
    the origin's rights (the pages keep the key in this origin's session storage): the original is
    served with a sandbox CSP (no script, a unique origin) and no content-type sniffing."""
    page = b"<!doctype html><title>Pump</title><p>The pump is primed with water.<script>alert(1)</script>"
    with own_key(server, "admin") as admin:
        made = upload(admin, "pump.html", page, scopes="acme").json()
        assert poll(admin, made["id"])["status"] == "completed"
    with own_key(server, "reader", "acme") as reader:
        path = f"/documents/{made['id']}/file"
        for response in (
            reader.get(path),
            reader.head(path),
            reader.get(path, headers={"Range": "bytes=0-9"}),
            reader.get(f"/documents/{server.documents['acme_note']}/file"),
        ):
            assert response.status_code in (200, 206), response.text
            assert response.headers["content-security-policy"] == "sandbox"
            assert response.headers["x-content-type-options"] == "nosniff"
        assert reader.get(path).headers["content-type"].startswith("text/html")
