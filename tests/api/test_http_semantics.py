"""What HTTP and docs/api.md promise a client of the real server: every method a path takes in a 405's
``Allow``, a conditional GET of a stored original, repeated filters that mean what they mean on search,
keys that say what they reach and where they are, and 422s that name their field."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.api.conftest import Server, own_admin


@pytest.fixture(scope="module")
def admin(server: Server) -> Iterator[httpx.Client]:
    with own_admin(server, "http-semantics") as client:
        yield client


def _allowed(response: httpx.Response) -> set[str]:
    return {m.strip() for m in response.headers["allow"].split(",")}


@pytest.mark.parametrize(
    ("method", "path", "takes"),
    [
        ("DELETE", "/search", {"GET", "HEAD", "POST"}),
        ("PUT", "/documents", {"GET", "HEAD", "POST"}),
        ("DELETE", "/documents/x/file", {"GET", "HEAD"}),
        ("POST", "/documents/x", {"GET", "HEAD", "PATCH", "DELETE"}),
    ],
)
def test_a_405_allows_every_method_the_path_takes(
    admin: httpx.Client, method: str, path: str, takes: set[str]
) -> None:
    response = admin.request(method, path)
    assert response.status_code == 405
    assert _allowed(response) == takes
    message = response.json()["error"]["message"]
    assert all(m in message.rsplit("takes", 1)[1] for m in takes), message


def test_a_listing_takes_several_scopes_as_search_does(server: Server, admin: httpx.Client) -> None:
    def listed(params: list[tuple[str, str]]) -> set[str]:
        response = admin.get("/documents", params=[*params, ("limit", "1000")])
        assert response.status_code == 200, response.text
        return {d["id"] for d in response.json()["documents"]}

    acme, globex = listed([("scope", "acme")]), listed([("scope", "globex")])
    assert server.documents["acme"] in acme and server.documents["globex"] in globex
    # Any of the scopes, as search's repeated scope: not the last one alone.
    assert listed([("scope", "acme"), ("scope", "globex")]) == acme | globex
    blank = admin.get("/documents", params=[("scope", "acme"), ("scope", " ")])
    assert blank.status_code == 422 and "query.scope" in blank.json()["error"]["message"]


def test_a_stored_original_not_changed_since_it_was_read_is_not_sent_again(
    server: Server, admin: httpx.Client
) -> None:
    url = f"/documents/{server.documents['acme']}/file"
    first = admin.get(url)
    assert first.status_code == 200 and first.content
    etag = first.headers["etag"]
    assert "no-cache" in first.headers["cache-control"] and "private" in first.headers["cache-control"]
    again = admin.get(url, headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    assert again.headers["etag"] == etag and "no-cache" in again.headers["cache-control"]
    # Any of several, or any at all; another tag gets the file.
    assert admin.get(url, headers={"If-None-Match": f'"other", {etag}'}).status_code == 304
    assert admin.get(url, headers={"If-None-Match": "*"}).status_code == 304
    other = admin.get(url, headers={"If-None-Match": '"other"'})
    assert other.status_code == 200 and other.content == first.content
    assert admin.head(url, headers={"If-None-Match": etag}).status_code == 304


def test_a_created_key_says_where_it_is_and_whether_it_reaches_every_scope(admin: httpx.Client) -> None:
    every = admin.post("/keys", json={"role": "reader", "all_scopes": True, "name": "every"})
    some = admin.post("/keys", json={"role": "reader", "scopes": ["acme"], "name": "some"})
    assert every.status_code == some.status_code == 201
    assert every.headers["location"] == f"/keys/{every.json()['id']}"
    assert (every.json()["all_scopes"], every.json()["scopes"]) == (True, None)
    assert (some.json()["all_scopes"], some.json()["scopes"]) == (False, ["acme"])
    listed = {k["id"]: k for k in admin.get("/keys").json()["keys"]}
    assert listed[every.json()["id"]]["all_scopes"] is True
    assert listed[some.json()["id"]]["all_scopes"] is False


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("POST", "/refresh", {"older_than": "soon"}, "body.older_than"),
        ("POST", "/index-all?status=processing", None, "query.status"),
        ("POST", "/keys", {"role": "reader"}, "body.scopes"),
        ("POST", "/keys", {"role": "reader", "scopes": []}, "body.scopes"),
    ],
)
def test_a_value_the_library_refuses_is_named_as_the_request_sent_it(
    admin: httpx.Client, method: str, path: str, body: dict[str, object] | None, field: str
) -> None:
    response = admin.request(method, path, json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["message"].startswith(f"{field}: "), response.text


def test_a_refresh_with_no_body_takes_every_default(admin: httpx.Client) -> None:
    response = admin.post("/refresh")
    assert response.status_code == 202, response.text
    assert response.json()["dry_run"] is False
