"""Every route, called with no key, a revoked key, a reader key, a reader key of another scope and an
admin key: who gets what, always in the one error shape."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any, Literal

import httpx
import pytest

from tests.api.conftest import Server

MISSING = str(uuid.UUID(int=7))
CALLERS = ("none", "revoked", "reader", "other", "admin")


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    #: read: any key; acme: a document in scope acme (readers of other scopes get 404); admin: admin keys
    #: only; public: no key needed.
    kind: Literal["read", "acme", "admin", "public"]
    body: dict[str, Any] | None = None
    #: The status the route answers a caller allowed to use it.
    ok: int = 200

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


ROUTES = (
    Route("GET", "/search?q=relief+valve", "read"),
    Route("POST", "/search", "read", {"query": "relief valve", "top_k": 3}),
    Route("POST", "/chat", "read", {"question": "When does the relief valve open?"}),
    Route("POST", "/chat/stream", "read", {"question": "When does the relief valve open?"}),
    Route("GET", "/conversations", "read"),
    Route("GET", f"/conversations/{MISSING}", "read", ok=404),
    Route("DELETE", f"/conversations/{MISSING}", "read", ok=404),
    Route("GET", "/documents", "read"),
    Route("GET", "/stats", "read"),
    Route("GET", "/builds", "read"),
    Route("GET", "/documents/{acme}", "acme"),
    Route("GET", "/documents/{acme}/file", "acme"),
    Route("GET", "/documents/{acme}/pages/1", "acme"),
    Route("GET", "/documents/{acme}/chunks", "acme"),
    Route("DELETE", f"/documents/{MISSING}", "admin", ok=404),
    Route("DELETE", f"/index/{MISSING}", "admin", ok=404),
    Route("GET", "/keys", "admin"),
    Route("POST", "/keys", "admin", {"role": "reader", "scopes": ["x"], "name": "matrix"}, ok=201),
    Route("DELETE", f"/keys/{MISSING}", "admin", ok=404),
    Route("GET", "/health/live", "public"),
    Route("GET", "/health/ready", "public"),
)


def expected(route: Route, caller: str) -> int:
    if route.kind == "public":
        return 200
    if caller in ("none", "revoked"):
        return 401
    if route.kind == "admin":
        return route.ok if caller == "admin" else 403
    if route.kind == "acme" and caller == "other":
        return 404
    return route.ok


def assert_error_shape(response: httpx.Response) -> None:
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "request_id"}, body
    assert body["error"]["request_id"] == response.headers["X-Request-ID"]
    assert body["error"]["code"] and isinstance(body["error"]["code"], str)
    assert body["error"]["message"] and isinstance(body["error"]["message"], str)
    assert "Traceback" not in response.text


@pytest.mark.parametrize("route", ROUTES, ids=str)
@pytest.mark.parametrize("caller", CALLERS)
def test_who_may_call_each_route(server: Server, route: Route, caller: str) -> None:
    with server.as_(caller) as client:
        response = client.request(route.method, route.path.format(**server.documents), json=route.body)
    assert response.status_code == expected(route, caller), response.text
    if response.status_code >= 400:
        assert_error_shape(response)
    if response.status_code == 401:
        assert response.headers["WWW-Authenticate"] == "Bearer"
        assert response.json()["error"]["code"] == "authentication"
    if response.status_code == 403:
        assert "admin key" in response.json()["error"]["message"]


def test_a_server_without_keys_refuses_requests_and_says_how_to_make_one(server: Server) -> None:
    assert server.before_keys is not None
    status, body = server.before_keys
    assert status == 401
    assert "citeline keys create" in body["error"]["message"]


def test_a_revoked_key_is_refused_from_the_next_request(server: Server) -> None:
    with server.as_("admin") as admin:
        made = admin.post("/keys", json={"role": "reader", "all_scopes": True}).json()
        with server.client(made["key"]) as reader:
            assert reader.get("/stats").status_code == 200
            assert admin.delete(f"/keys/{made['id']}").json()["revoked_at"] is not None
            refused = reader.get("/stats")
    assert refused.status_code == 401
    assert "revoked" in refused.json()["error"]["message"]


def test_unknown_routes_and_bad_bodies_answer_in_the_error_shape(server: Server) -> None:
    with server.as_("admin") as client:
        unknown = client.get("/no/such/route")
        invalid = client.post("/search", json={"top_k": "many"})
        not_json = client.post("/search", content=b"{", headers={"Content-Type": "application/json"})
        wrong_method = client.put("/stats")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"
    assert invalid.status_code == 422 and invalid.json()["error"]["code"] == "invalid_request"
    assert "query" in invalid.json()["error"]["message"] and "top_k" in invalid.json()["error"]["message"]
    assert not_json.status_code == 422
    assert wrong_method.status_code == 405
    for response in (unknown, invalid, not_json, wrong_method):
        assert_error_shape(response)


def test_the_openapi_description_lists_every_route(server: Server) -> None:
    docs = httpx.get(f"{server.url}/docs")
    assert docs.status_code == 200
    # Served whole from this server, as the pages are: it works with no internet.
    loaded = re.findall(r"""(?:src|href)=["']([^"']+)["']""", docs.text) + re.findall(
        r"url: '([^']+)'", docs.text
    )
    assert {"/static/vendor/swagger-ui/swagger-ui-bundle.js", "/openapi.json"} <= set(loaded), loaded
    assert {url for url in loaded if not url.startswith(("data:", "/"))} == set(), loaded
    for url in (u for u in loaded if u.startswith("/")):
        assert httpx.get(f"{server.url}{url}").status_code == 200, url
    assert httpx.get(f"{server.url}/redoc").status_code in (401, 404)
    paths = httpx.get(f"{server.url}/openapi.json").json()["paths"]
    for route in ROUTES:
        path = route.path.split("?")[0]
        assert any(_matches(path, template) for template in paths), route


def _matches(path: str, template: str) -> bool:
    """Whether ``path`` is an instance of the OpenAPI path ``template`` (``{name}`` matches any part)."""
    parts, slots = path.strip("/").split("/"), template.strip("/").split("/")
    return len(parts) == len(slots) and all(
        slot.startswith("{") or part == slot for part, slot in zip(parts, slots, strict=True)
    )


@pytest.mark.parametrize(
    ("path", "caller"),
    [
        ("/", "none"),
        ("/admin", "none"),
        ("/static/chat.js", "none"),
        ("/health/live", "none"),
        ("/health/ready", "none"),
        ("/search?q=relief+valve", "reader"),
        ("/search?q=relief+valve", "none"),
        ("/no/such/route", "admin"),
    ],
)
def test_head_answers_as_get_does_without_the_body(server: Server, path: str, caller: str) -> None:
    # Load balancers and `curl -I` probe with HEAD: the status and headers a GET gets, no body.
    with server.as_(caller) as client:
        got, head = client.get(path), client.head(path)
    assert head.status_code == got.status_code, (path, head.status_code, got.status_code)
    assert head.content == b""
    assert head.headers["content-type"] == got.headers["content-type"]
    assert head.headers.get("content-security-policy") == got.headers.get("content-security-policy")


@pytest.mark.parametrize(("first", "second"), [("admin", "reader"), ("reader", "admin"), ("admin", "admin")])
def test_a_request_with_two_authorization_headers_is_refused_whichever_keys_they_carry(
    server: Server, first: str, second: str
) -> None:
    """Which of two keys counts is the reader's to guess (a proxy adds one, a client another): the
    request is refused, not served under the first."""
    headers = [
        ("Authorization", f"Bearer {server.keys[first]}"),
        ("Authorization", f"Bearer {server.keys[second]}"),
    ]
    with server.client() as client:
        for method, path in (("GET", "/keys"), ("GET", "/stats"), ("GET", f"/documents/{MISSING}")):
            refused = client.request(method, path, headers=headers)
            assert refused.status_code == 400, (path, refused.text)
            assert_error_shape(refused)
            assert refused.json()["error"]["code"] == "invalid_request"
            assert refused.json()["error"]["message"] == (
                "header.authorization: a request carries one Authorization header, this one carried 2"
            )
