"""The OpenAPI document is the API's contract: every answer a real server gives, success or error, is
declared by ``/openapi.json`` for its route, method and status, in its media type, and its body
validates against the schema declared there, with no field the schema does not name.

A client generated from the document (openapi-generator, openapi-typescript, ...) is only as right as
this: an undeclared status, a free-form body or an error shape the document does not give is a
client that breaks on a real answer.
"""

from __future__ import annotations

import json
import re
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from tests.api.conftest import Server, own_admin, read_events

SPEC_URN = "urn:citeline:openapi"


def closed(schema: Any) -> Any:
    """``schema`` with every object that names its properties and says nothing of others closed to
    them: the document leaves them open (a generated client tolerates a later field), the test does
    not (the server must not send a field the document does not declare)."""
    if isinstance(schema, dict):
        out = {key: closed(value) for key, value in schema.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [closed(item) for item in schema]
    return schema


@dataclass
class Contract:
    """Checks each answer against the document a server serves, and records what was checked."""

    server: Server
    spec: dict[str, Any]
    registry: Registry = field(init=False)
    checked: set[tuple[str, str, int]] = field(default_factory=set)

    def __post_init__(self) -> None:
        strict = closed(self.spec)
        self.registry = Registry().with_resource(
            SPEC_URN, Resource.from_contents(strict, default_specification=DRAFT202012)
        )

    def template(self, path: str) -> str:
        template: str
        for template in self.spec["paths"]:
            if re.fullmatch(re.sub(r"\{[^}]+\}", "[^/]+", template), path):
                return template
        raise AssertionError(f"{path} is not in /openapi.json")

    def validate(self, instance: Any, schema: dict[str, Any], what: str) -> None:
        text = json.dumps(schema).replace('"#/components', f'"{SPEC_URN}#/components')
        validator = Draft202012Validator(closed(json.loads(text)), registry=self.registry)
        problems = [
            f"{'/'.join(map(str, e.absolute_path)) or '(body)'}: {e.message[:300]}"
            for e in validator.iter_errors(instance)
        ]
        assert not problems, f"{what} does not match its declared schema:\n" + "\n".join(problems)

    def check(self, response: httpx.Response, *, stream: bool = False) -> httpx.Response:
        """``response`` as the document declares it: status, media type and body (a ``stream``'s body
        is left to :meth:`check_stream`)."""
        method = response.request.method
        path = urlsplit(str(response.request.url)).path
        template = self.template(path)
        operation = self.spec["paths"][template].get(method.lower())
        what = f"{method} {path} -> {response.status_code}"
        assert operation is not None, f"{method} {template} is not in /openapi.json"
        declared = operation["responses"].get(str(response.status_code))
        assert declared is not None, (
            f"{what} is undeclared (declared: {', '.join(operation['responses'])}): {response.text[:300]}"
        )
        self.checked.add((method, template, response.status_code))
        if method == "HEAD" or (not stream and not response.content):
            return response
        media = response.headers.get("content-type", "").split(";")[0].strip()
        content = declared.get("content", {})
        assert media in content, f"{what}: media type {media} undeclared (declared: {list(content)})"
        if media == "application/json" and not stream:
            self.validate(response.json(), content[media]["schema"], what)
        return response

    def check_stream(self, response: httpx.Response) -> list[str]:
        """A server-sent event stream: each event named in the operation's ``x-events``, its data
        valid against that event's schema; the names, in order."""
        self.check(response, stream=True)
        declared = self.spec["paths"]["/chat/stream"]["post"]["responses"]["200"]["content"]
        events = declared["text/event-stream"]["x-events"]
        names = []
        for event in read_events(response.iter_lines()):
            if event.name == ":":
                continue
            assert event.name in events, f"event {event.name} undeclared (declared: {list(events)})"
            self.validate(event.data, events[event.name], f"event {event.name}")
            names.append(event.name)
        return names


@pytest.fixture(scope="module")
def contract(server: Server) -> Contract:
    spec = httpx.get(f"{server.url}/openapi.json", timeout=30).json()
    return Contract(server, spec)


@pytest.fixture(scope="module")
def admin(server: Server) -> Iterator[httpx.Client]:
    with own_admin(server, "openapi contract") as client:
        yield client


@pytest.fixture(scope="module")
def reader(server: Server, admin: httpx.Client) -> Iterator[httpx.Client]:
    made = admin.post("/keys", json={"role": "reader", "scopes": ["acme"], "name": "openapi contract"})
    with server.client(made.json()["key"]) as client:
        yield client


def test_the_document_is_valid_openapi(contract: Contract) -> None:
    openapi_spec_validator = pytest.importorskip("openapi_spec_validator")
    openapi_spec_validator.validate(contract.spec)


def test_operations_have_readable_ids_and_errors_have_the_api_shape(contract: Contract) -> None:
    operations = [op for item in contract.spec["paths"].values() for op in item.values()]
    ids = [op["operationId"] for op in operations]
    assert len(ids) == len(set(ids))
    assert "search" in ids and "list_documents" in ids and "add_document" in ids
    assert all(re.fullmatch(r"[a-z][a-z_]*", i) and "__" not in i for i in ids), ids
    schemas = contract.spec["components"]["schemas"]
    assert "HTTPValidationError" not in schemas
    for op in operations:
        for status, response in op["responses"].items():
            if "content" in response and int(status) >= 400 and op["operationId"] != "health_ready":
                assert response["content"]["application/json"]["schema"] == {
                    "$ref": "#/components/schemas/ErrorBody"
                }, (op["operationId"], status)
    upload = contract.spec["paths"]["/documents"]["post"]["requestBody"]["content"]
    assert set(upload) == {"multipart/form-data", "application/json"}
    persona = schemas["ChatBody"]["properties"]["persona"]["anyOf"][0]
    assert persona["enum"] == ["general", "clinical", "repair"]
    assert "n_results" in schemas["SearchBody"]["properties"]


def test_search_answers_as_declared(contract: Contract, admin: httpx.Client, server: Server) -> None:
    check = contract.check
    check(admin.get("/search", params={"q": "relief valve", "n": 3}))
    check(admin.head("/search", params={"q": "relief valve"}))
    hits = check(admin.post("/search", json={"query": "relief valve", "top_k": 2})).json()
    assert hits["count"] == 2
    check(admin.post("/search", json={"query": "relief valve", "n_results": 2}))
    check(admin.post("/search", json={"query": "x", "scope": ["a"]}))  # 422: unknown field
    check(admin.post("/search", json={"query": "x", "document_ids": ["zzzz"]}))
    check(admin.get("/search", params={"q": "x", "scopes": "a"}))  # 422: unknown parameter
    check(admin.post("/search", json={"query": "x", "tags": ["a" * 70_000]}))  # 413
    with server.client() as anonymous:
        check(anonymous.get("/search", params={"q": "x"}))  # 401
    with server.client("cl_not_a_key") as unknown:
        check(unknown.get("/search", params={"q": "x"}))


def test_documents_answer_as_declared(
    contract: Contract, admin: httpx.Client, reader: httpx.Client, server: Server
) -> None:
    check = contract.check
    pdf, note, globex = (server.documents[name] for name in ("acme", "acme_note", "globex"))
    check(admin.get("/documents"))
    check(admin.get("/documents", params={"status": "bogus"}))
    check(reader.get("/documents", params={"limit": 2}))
    check(admin.get(f"/documents/{pdf}"))
    check(admin.get(f"/documents/{pdf[:8]}"))
    check(admin.get("/documents/nonexistent"))
    check(reader.get(f"/documents/{globex}"))
    check(admin.get(f"/documents/{pdf}/versions"))
    check(reader.get(f"/documents/{pdf}/versions"))  # 403
    check(admin.get(f"/documents/{pdf}/chunks", params={"limit": 2}))
    check(admin.get(f"/documents/{pdf}/pages/1"))
    check(admin.get(f"/documents/{pdf}/pages/999"))
    check(admin.get(f"/documents/{pdf}/pages/0"))
    whole = check(admin.get(f"/documents/{pdf}/file"))
    assert whole.headers["content-type"] == "application/pdf"
    check(admin.head(f"/documents/{pdf}/file"))
    check(admin.head(f"/documents/{pdf}"))
    check(admin.get(f"/documents/{pdf}/file", headers={"Range": "bytes=0-99"}))
    check(admin.get(f"/documents/{pdf}/file", headers={"Range": "bytes=99999999-"}))
    check(admin.get(f"/documents/{pdf}/file", headers={"Range": "garbage"}))
    check(admin.get("/builds"))
    check(admin.get("/builds", params={"failed_within": "1d"}))
    check(admin.get("/builds", params={"failed_within": "bogus"}))
    check(admin.post(f"/documents/{note}/index"))  # 409: built already
    check(admin.post(f"/index/{note}"))
    check(admin.post("/index-all", params={"status": "superseded"}))
    check(admin.post("/refresh", json={"dry_run": True}))
    check(admin.post("/refresh", json={"older_than": "bogus"}))
    check(admin.patch(f"/documents/{note}", json={"tagz": ["pump"]}))
    check(reader.patch(f"/documents/{note}", json={"tags": ["pump"]}))


def test_changing_documents_answers_as_declared(contract: Contract, admin: httpx.Client) -> None:
    check = contract.check
    text = f"# Contract\n\nThe contract pump {uuid.uuid4()} runs at 3 bar.".encode()
    form = {"scopes": "contract", "index": "false"}
    added = check(admin.post("/documents", files={"file": ("contract.md", text, "text/markdown")}, data=form))
    assert added.status_code == 202
    doc = added.json()["id"]
    check(admin.post("/documents", files={"file": ("c.md", text, "text/markdown")}, data={"bogus": "1"}))
    check(admin.post("/documents", files={"file": ("c.docx", b"abc", "application/octet-stream")}))
    check(admin.post("/documents", json={"urll": "x"}))
    check(admin.post("/documents", content=b"x", headers={"Content-Type": "text/plain"}))
    check(admin.patch(f"/documents/{doc}", json={"tags": ["pump"], "metadata": {"year": "2024"}}))
    check(admin.post(f"/index/{doc}"))
    check(admin.post(f"/documents/{doc}/cancel"))
    check(admin.post(f"/documents/{doc}/cancel"))
    check(admin.post(f"/documents/{doc}/reingest"))
    check(admin.post("/index-all", params={"status": "pending"}))
    check(admin.post("/refresh", json={"document_ids": [doc]}))
    pending = {"scopes": "contract", "index": "false"}
    second = check(
        admin.post("/documents", files={"file": ("c2.md", text + b"!", "text/markdown")}, data=pending)
    )
    check(admin.post(f"/documents/{second.json()['id']}/index"))
    check(admin.delete(f"/index/{second.json()['id']}"))
    check(admin.delete(f"/documents/{doc}"))
    check(admin.delete(f"/documents/{doc}"))  # 404: gone
    # A re-ingest's success, on a document built first: the one above may still be queued or cancelled
    # when it is asked, which answers 409, however fast the runner is.
    built = check(admin.post("/documents", files={"file": ("built.md", text + b"?", "text/markdown")}))
    built_id = built.json()["id"]
    try:
        completed(admin, built_id)
        assert check(admin.post(f"/documents/{built_id}/reingest")).status_code == 202
        completed(admin, built_id)
    finally:
        check(admin.delete(f"/documents/{built_id}"))


def completed(admin: httpx.Client, document: str) -> None:
    """Wait until ``document``'s current version is built."""
    deadline = time.monotonic() + 120
    while admin.get(f"/documents/{document}").json()["status"] != "completed":
        assert time.monotonic() < deadline, f"{document} was not built within 120 s"
        time.sleep(0.2)


def test_keys_stats_and_health_answer_as_declared(
    contract: Contract, admin: httpx.Client, reader: httpx.Client, server: Server
) -> None:
    check = contract.check
    check(admin.get("/stats"))
    check(reader.get("/stats"))
    check(admin.get("/metrics"))
    check(reader.get("/metrics"))  # 403: for admins
    check(admin.get("/keys"))
    check(admin.get("/keys", params={"include_revoked": "true"}))
    check(reader.get("/keys"))
    check(admin.get("/keys/me"))
    check(reader.get("/keys/me"))
    made = check(admin.post("/keys", json={"role": "reader", "scopes": ["acme"], "name": "contract"}))
    check(admin.post("/keys", json={"role": "root"}))
    check(admin.delete(f"/keys/{made.json()['id']}"))
    check(admin.delete("/keys/00000000-0000-0000-0000-000000000000"))
    with server.client() as anonymous:
        check(anonymous.get("/health/live"))
        check(anonymous.head("/health/live"))
        check(anonymous.get("/health/ready"))
        check(anonymous.get("/health/live", params={"verbose": "1"}))


def test_answers_and_conversations_answer_as_declared(
    contract: Contract, admin: httpx.Client, server: Server
) -> None:
    check = contract.check
    answer = check(
        admin.post("/chat", json={"question": "At what pressure does the ACME relief valve open?"})
    )
    conversation = answer.json()["conversation_id"]
    with admin.stream(
        "POST", "/chat/stream", json={"question": "Who tests it?", "conversation_id": conversation}
    ) as stream:
        names = contract.check_stream(stream)
    assert names[:3] == ["start", "rewrite", "evidence"] and names[-1] == "complete"
    check(admin.post("/chat/stream", json={"question": "x", "persona": "pirate"}))
    check(admin.post("/chat", json={"question": "x", "conversation_id": str(uuid.uuid4())}))
    check(admin.post("/chat", json={"question": "   "}))
    check(admin.get("/conversations"))
    check(admin.get(f"/conversations/{conversation}"))
    check(admin.get("/conversations/notauuid"))
    check(admin.delete(f"/conversations/{conversation}"))
    check(admin.delete(f"/conversations/{conversation}"))


def _raw(server: Server, request: bytes) -> httpx.Response:
    """What the server answers bytes no client library would send, as an httpx response to check."""
    host, port = urlsplit(server.url).netloc.split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = [(name, value) for name, _, value in (line.partition(": ") for line in lines[1:])]
    return httpx.Response(
        int(lines[0].split()[1]),
        headers=headers,
        content=body,
        request=httpx.Request("GET", f"{server.url}/search"),
    )


def test_answers_made_before_the_application_are_declared(
    contract: Contract, admin: httpx.Client, server: Server
) -> None:
    """400 and 431 come from the server's HTTP protocol, 414 and 413 from the middleware: every route
    declares them, in the same error shape."""
    bad = contract.check(
        _raw(server, b"GET /search?q=x HTTP/1.1\r\nHost: a\r\nBad Header\r\nConnection: close\r\n\r\n")
    )
    assert bad.status_code == 400
    big = b"x" * 70_000
    headers = contract.check(
        _raw(
            server, b"GET /search?q=x HTTP/1.1\r\nHost: a\r\nX-Big: " + big + b"\r\nConnection: close\r\n\r\n"
        )
    )
    assert headers.status_code == 431
    long_url = b"GET /search?q=" + b"x" * 70_000 + b" HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
    assert contract.check(_raw(server, long_url)).status_code == 414


def test_a_rate_limited_key_is_answered_as_declared(
    contract: Contract, admin: httpx.Client, server: Server
) -> None:
    made = admin.post("/keys", json={"role": "reader", "scopes": ["acme"], "name": "contract rate"})
    with server.client(made.json()["key"]) as client:
        deadline = time.monotonic() + 60
        while (response := client.get("/keys/me")).status_code != 429 and time.monotonic() < deadline:
            pass
    assert contract.check(response).status_code == 429


def test_every_operation_was_checked_for_a_success(contract: Contract) -> None:
    """The tests above reach every route: a route added without its contract checked fails here."""
    succeeded = {(method.lower(), template) for method, template, status in contract.checked if status < 300}
    missing = [
        f"{method.upper()} {template}"
        for template, item in contract.spec["paths"].items()
        for method in item
        if (method, template) not in succeeded and not (method == "head" and ("get", template) in succeeded)
    ]
    assert not missing, f"no success checked for: {', '.join(missing)}"
