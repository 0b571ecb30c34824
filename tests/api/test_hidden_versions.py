"""A key reads the versions of its scopes only, and a document it may not read is refused in the words
of one that does not exist: a refusal tells no one that an id is taken in another scope."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.conftest import Server, add_keys, base_env, start_server, stop_server

MISSING = str(uuid.UUID(int=7))


def upload(client: httpx.Client, name: str, data: bytes, **fields: str) -> dict[str, Any]:
    response = client.post("/documents", files={"file": (name, data)}, data=fields)
    assert response.status_code in (200, 202), response.text
    made: dict[str, Any] = response.json()
    return made


def settled(client: httpx.Client, document_id: str) -> None:
    """Wait until no version of the document is queued or being built (pending ones stay pending)."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        versions = client.get(f"/documents/{document_id}/versions").json()["versions"]
        if not any(v["status"] in ("queued", "processing") for v in versions):
            return
        time.sleep(0.5)
    raise AssertionError(f"document {document_id} was still being built after 240 s")


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, fresh_data_dir: Callable[[str], Path]
) -> Iterator[Server]:
    """A server of these tests' own, with documents whose versions carry different scopes:

    ``b_then_a``: a globex upload that failed (kept), replaced by an acme version waiting to be indexed,
    so its current version is acme's; ``a_then_b``: an acme document with a globex replacement waiting;
    ``globex``: a globex document.
    """
    env = base_env(fresh_data_dir("citeline-hidden-"), CITELINE_LLM="extractive")
    started = start_server(env, tmp_path_factory.mktemp("hidden-log") / "serve.log")
    try:
        add_keys(started, env, {"reader": ["acme"]})
        with started.as_("admin") as admin:
            b = upload(admin, "globex-draft.pdf", b"not a PDF at all", scopes="globex")
            settled(admin, b["id"])
            upload(
                admin,
                "acme-now.md",
                b"# Valve\n\nThe acme valve opens at 6 bar.",
                scopes="acme",
                document_id=b["id"],
                index="false",
            )
            a = upload(admin, "acme-pump.md", b"# Pump\n\nThe acme pump is primed with water.", scopes="acme")
            settled(admin, a["id"])
            upload(
                admin,
                "globex-pump.md",
                b"# Pump\n\nThe globex pump is primed with glycol.",
                scopes="globex",
                document_id=a["id"],
                index="false",
            )
            g = upload(
                admin, "globex-boiler.md", b"# Boiler\n\nThe globex boiler opens at 12 bar.", scopes="globex"
            )
            settled(admin, g["id"])
            started.documents.update(b_then_a=b["id"], a_then_b=a["id"], globex=g["id"])
        yield started
    finally:
        stop_server(started)


def error_text(response: httpx.Response, *replace: tuple[str, str]) -> str:
    """The response's status and body without its request id, with ``replace`` applied."""
    body = response.json()
    assert set(body) == {"error"} and body["error"].pop("request_id")
    text = f"{response.status_code} {body}"
    for old, new in replace:
        text = text.replace(old, new)
    return text


VERSIONED = ("", "/file", "/pages/1", "/chunks")


@pytest.mark.parametrize(("document", "hidden"), [("b_then_a", 1), ("a_then_b", 2)])
def test_a_reader_cannot_read_a_version_of_another_scope(server: Server, document: str, hidden: int) -> None:
    doc = server.documents[document]
    with server.as_("admin") as admin:
        assert admin.get(f"/documents/{doc}", params={"version": hidden}).json()["scopes"] == ["globex"]
        versions = admin.get(f"/documents/{doc}/versions").json()["versions"]
        assert [v["scopes"] for v in versions] in ([["globex"], ["acme"]], [["acme"], ["globex"]])
    with server.as_("reader") as reader:
        current = reader.get(f"/documents/{doc}").json()
        assert current["scopes"] == ["acme"] and current["version"] == 3 - hidden
        for tail in VERSIONED:
            refused = reader.get(f"/documents/{doc}{tail}", params={"version": hidden})
            absent = reader.get(f"/documents/{doc}{tail}", params={"version": 9})
            # Nothing of the version: answered as a version the catalog does not hold.
            assert refused.status_code == 404, (tail, refused.text)
            assert "globex" not in refused.text
            assert error_text(refused) == error_text(absent, ("version 9", f"version {hidden}")), tail


def test_a_document_out_of_reach_is_refused_as_one_that_does_not_exist(server: Server) -> None:
    hidden = server.documents["globex"]
    answers: set[str] = set()
    with server.as_("reader") as reader:
        for ref, other in ((hidden, MISSING), (hidden[:8], MISSING[:8])):
            for tail in (*VERSIONED, "?version=1"):
                refused = reader.get(f"/documents/{ref}{tail}")
                absent = reader.get(f"/documents/{other}{tail}")
                assert refused.status_code == absent.status_code == 404, (tail, refused.text)
                answers.add(error_text(refused, (ref, "ID")))
                answers.add(error_text(absent, (other, "ID")))
    with server.as_("admin") as admin:
        for path in (f"/index/{MISSING}", f"/documents/{MISSING}"):
            answers.add(error_text(admin.delete(path), (MISSING, "ID")))
    assert answers == {"404 {'error': {'code': 'not_found', 'message': \"no document with id 'ID'\"}}"}
