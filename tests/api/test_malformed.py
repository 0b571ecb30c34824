"""Requests no route can act on, found by an exploratory pass over the API: each is a 4xx in the one
error shape, naming what is wrong, never a 500 from deep in the store.

- A NUL character (``\\u0000``, ``%00``) in any text: PostgreSQL can neither store nor compare one.
- An offset past what the database counts with (a bigint).
- An age for ``POST /refresh`` longer than a date can reach back.
- A ``Range`` header the stored file cannot honour (plain text from the framework before).
- A body the framework cannot parse (JSON that is not UTF-8, a second file): 422, not an
  undocumented 400.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.api.conftest import Server, own_admin

NUL = "a\x00b"


@pytest.fixture(scope="module")
def admin(server: Server) -> Iterator[httpx.Client]:
    """An admin key of these tests' own: their requests count against no other test's rate limit."""
    with own_admin(server, "malformed requests") as client:
        yield client


def refused(response: httpx.Response, *named: str, status: int = 422, code: str = "invalid_request") -> None:
    assert response.status_code == status, response.text
    assert set(response.json()) == {"error"}, response.text
    error = response.json()["error"]
    assert error["code"] == code, error
    for name in named:
        assert name in error["message"], (name, error)


@pytest.mark.parametrize(
    ("method", "path", "body", "named"),
    [
        ("POST", "/search", {"query": NUL}, "query"),
        ("POST", "/search", {"query": "valve", "content_types": [NUL]}, "content_types.0"),
        ("POST", "/search", {"query": "valve", "metadata": {"site": NUL}}, "metadata.site"),
        ("POST", "/chat", {"question": f"When does the relief valve open? {NUL}"}, "question"),
        ("POST", "/chat/stream", {"question": f"When does the relief valve open? {NUL}"}, "question"),
        ("POST", "/keys", {"role": "reader", "scopes": [NUL]}, "scopes.0"),
        ("POST", "/keys", {"role": "reader", "scopes": ["acme"], "name": NUL}, "name"),
        ("PATCH", "/documents/{universal}", {"category": NUL}, "category"),
        ("PATCH", "/documents/{universal}", {"tags": [NUL]}, "tags.0"),
    ],
)
def test_a_nul_character_in_a_body_is_a_422_naming_the_field(
    server: Server, admin: httpx.Client, method: str, path: str, body: dict[str, Any], named: str
) -> None:
    before = admin.get("/conversations").json()["conversations"]
    response = admin.request(method, path.format(**server.documents), json=body)
    refused(response, named, "NUL")
    # Refused before it starts: no conversation is left behind by a question that cannot be stored.
    assert admin.get("/conversations").json()["conversations"] == before
    assert admin.get(f"/documents/{server.documents['universal']}").json()["category"] == "site"


def test_a_nul_character_in_an_uploaded_file_name_is_a_422_from_the_library(admin: httpx.Client) -> None:
    # The name reaches no check of the API's own: the library's Upload refuses it, for every shell.
    boundary = "nul-in-the-name"
    body = (
        f"--{boundary}\r\n"
        'Content-Disposition: form-data; name="file"; filename="valves\x00.md"\r\n'
        "Content-Type: text/markdown\r\n\r\n"
        f"# Valves\r\n--{boundary}--\r\n"
    ).encode()
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    before = admin.get("/documents").json()["total"]
    refused(admin.post("/documents", content=body, headers=headers), "upload.name", "NUL")
    assert admin.get("/documents").json()["total"] == before


@pytest.mark.parametrize(
    ("path", "params", "named"),
    [
        ("/search", {"q": NUL}, "query.q"),
        ("/search", {"q": "valve", "scope": NUL}, "query.scope"),
        ("/search", {"q": "valve", "category": NUL}, "query.category"),
        ("/search", {"q": "valve", "tag": NUL}, "query.tag"),
        ("/documents", {"name_contains": NUL}, "query.name_contains"),
        ("/documents", {"content_type": NUL}, "query.content_type"),
        ("/documents", {"source_prefix": NUL}, "query.source_prefix"),
        ("/documents/{acme_note}%00", {}, "path.document_id"),
    ],
)
def test_a_nul_character_in_the_url_is_a_422_naming_the_parameter(
    server: Server, admin: httpx.Client, path: str, params: dict[str, str], named: str
) -> None:
    refused(admin.get(path.format(**server.documents), params=params), named, "NUL")


@pytest.mark.parametrize("path", ["/documents", "/documents/{acme}/chunks"])
def test_an_offset_past_the_databases_range_is_a_422(server: Server, admin: httpx.Client, path: str) -> None:
    path = path.format(**server.documents)
    refused(admin.get(path, params={"offset": str(2**63)}), "query.offset")
    assert admin.get(path, params={"offset": str(2**63 - 1)}).status_code == 200


def test_an_age_past_what_a_date_can_reach_is_a_422_and_the_longest_one_finds_nothing(
    admin: httpx.Client,
) -> None:
    refused(admin.post("/refresh", json={"older_than": "99999999999d", "dry_run": True}), "99999999999d")
    longest = admin.post("/refresh", json={"older_than": "999999999d", "dry_run": True})
    assert longest.status_code == 202, longest.text
    assert longest.json()["documents"] == []


def test_a_range_the_file_cannot_honour_is_refused_in_the_error_shape(
    server: Server, admin: httpx.Client
) -> None:
    path = f"/documents/{server.documents['acme_note']}/file"
    size = len(admin.get(path).content)
    past = admin.get(path, headers={"Range": f"bytes={size + 10}-{size + 20}"})
    refused(past, "past", status=416, code="range_not_satisfiable")
    assert past.headers["content-range"] == f"bytes */{size}"
    refused(admin.get(path, headers={"Range": "bytes=9-2"}), "header.range")
    refused(admin.get(path, headers={"Range": "lines=1-2"}), "header.range")
    # What it can honour still streams, and a Range under an If-Range that no longer matches is ignored.
    assert admin.get(path, headers={"Range": "bytes=0-3"}).status_code == 206
    assert admin.get(path, headers={"Range": "bytes=9-2", "If-Range": '"stale"'}).status_code == 200


def test_a_body_the_framework_cannot_parse_is_a_422(admin: httpx.Client) -> None:
    latin = b'{"query": "relief valve \xe9"}'
    refused(admin.post("/search", content=latin, headers={"Content-Type": "application/json"}), "body")
    two = {"file": ("a.md", b"# A"), "other": ("b.md", b"# B")}
    refused(admin.post("/documents", files=two), "body")


def test_an_unknown_route_or_method_is_refused_naming_the_request(admin: httpx.Client) -> None:
    # The router's own "Not Found" and "Method Not Allowed" named neither the request nor what would do.
    nowhere = admin.get("/nope")
    refused(nowhere, "no route GET /nope", "/docs", status=404, code="not_found")
    wrong = admin.put("/search", json={"query": "valve"})
    takes = "GET, HEAD, POST"  # every method of the path, not only the first route's (POST)
    refused(
        wrong, "PUT /search is not allowed", f"/search takes {takes}", status=405, code="method_not_allowed"
    )
    assert wrong.headers["allow"] == takes
