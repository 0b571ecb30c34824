"""What the API refuses in a request before it acts: a field no route takes, a blank scope, a metadata
value that is not a string, a reader key bound to nothing. Each is a 422 ``invalid_request`` whose
message names the field, never a request run as if the mistake were not there.

Requests that change documents are refused the same way; test_documents_write.py checks those on a
server of its own, so that a regression cannot relabel the documents the other tests read.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.api.conftest import Server, own_admin


@pytest.fixture(scope="module")
def admin(server: Server) -> Iterator[httpx.Client]:
    """An admin key of these tests' own: their requests count against no other test's rate limit."""
    with own_admin(server, "request bodies") as client:
        yield client


def refused(response: httpx.Response, *fields: str) -> str:
    """The message of a 422 ``invalid_request`` that names each of ``fields``."""
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request", error
    for name in fields:
        assert name in error["message"], (name, error)
    message: str = error["message"]
    return message


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/search", {"query": "relief valve", "scope": ["acme"], "top_k": 3}),
        ("/chat", {"question": "When does the relief valve open?", "scope": ["acme"]}),
        ("/chat/stream", {"question": "When does the relief valve open?", "scope": ["acme"]}),
        ("/keys", {"role": "reader", "scope": ["acme"]}),
        ("/refresh", {"dry_run": True, "scope": ["acme"]}),
    ],
)
def test_a_field_the_route_does_not_take_is_refused_by_name(
    admin: httpx.Client, path: str, body: dict[str, Any]
) -> None:
    # `scope` for `scopes`: ignored, the search would run over every scope the key sees.
    message = refused(admin.post(path, json=body), "body.scope")
    assert "not permitted" in message


@pytest.mark.parametrize(
    ("path", "misspelt"),
    [
        ("/search?q=relief+valve&scopes=acme", "query.scopes"),  # `scope` is the filter
        ("/search?q=relief+valve&top_k=1", "query.top_k"),  # `n` is the count
        ("/documents?limit=5&scopes=acme", "query.scopes"),
        ("/stats?verbose=1", "query.verbose"),
    ],
)
def test_a_query_parameter_the_route_does_not_take_is_refused_by_name(
    admin: httpx.Client, path: str, misspelt: str
) -> None:
    message = refused(admin.get(path), misspelt)
    assert "unknown query parameter (this route takes: " in message


def test_the_query_parameters_a_route_takes_are_still_taken(admin: httpx.Client) -> None:
    found = admin.get("/search", params={"q": "relief valve", "n": 1, "scope": "acme"})
    assert found.status_code == 200 and found.json()["count"] <= 1, found.text


def test_n_results_is_still_taken_for_top_k(admin: httpx.Client) -> None:
    found = admin.post("/search", json={"query": "relief valve", "n_results": 1})
    assert found.status_code == 200, found.text
    assert found.json()["count"] == 1


def test_top_k_and_n_results_together_are_one_setting(admin: httpx.Client) -> None:
    # n_results is another name for top_k: both given was "body.n_results: Extra inputs are not
    # permitted", as if n_results were not taken at all.
    differ = admin.post("/search", json={"query": "relief valve", "top_k": 1, "n_results": 3})
    message = refused(differ, "top_k", "n_results")
    assert (
        message.startswith("body: ")
        and "(n_results is another name for top_k), given 1 and 3; send one" in message
    )
    same = admin.post("/search", json={"query": "relief valve", "top_k": 1, "n_results": 1})
    assert same.status_code == 200 and same.json()["count"] == 1, same.text


@pytest.mark.parametrize("blank", ["", "   "])
def test_a_blank_query_or_question_is_refused_by_name(admin: httpx.Client, blank: str) -> None:
    # The library's "the search query is empty" named no field of the request.
    for response, field in [
        (admin.post("/search", json={"query": blank}), "body.query"),
        (admin.get("/search", params={"q": blank}), "query.q"),
        (admin.post("/chat", json={"question": blank}), "body.question"),
        (admin.post("/chat/stream", json={"question": blank}), "body.question"),
    ]:
        assert refused(response, field).startswith(f"{field}: "), response.text


def test_a_filter_the_library_refuses_is_named_as_the_request_sent_it(admin: httpx.Client) -> None:
    # The library names its own field ("content_types: unknown content type 'docx'"); a body's fields
    # are named "body.<field>" everywhere else.
    for response in [
        admin.post("/search", json={"query": "relief valve", "content_types": ["docx"]}),
        admin.post("/chat", json={"question": "Valves?", "content_types": ["docx"]}),
    ]:
        assert refused(response).startswith("body.content_types: unknown content type 'docx'; known: ")
    padded = admin.get("/search", params={"q": "relief valve", "scope": " acme"})
    assert refused(padded).startswith("query.scope: a scope must not start or end with whitespace")


@pytest.mark.parametrize("scope", ["", "   "])
def test_a_blank_scope_is_refused_wherever_scopes_are_taken(admin: httpx.Client, scope: str) -> None:
    question = "When does the relief valve open?"
    refused(admin.post("/search", json={"query": "relief valve", "scopes": ["acme", scope]}), "scopes.1")
    refused(admin.get("/search", params={"q": "relief valve", "scope": scope}), "scope")
    refused(admin.post("/chat", json={"question": question, "scopes": [scope]}), "scopes.0")
    refused(admin.post("/chat/stream", json={"question": question, "scopes": [scope]}), "scopes.0")
    refused(admin.post("/keys", json={"role": "reader", "scopes": [scope]}), "scopes.0")


def test_a_metadata_filter_takes_only_strings(admin: httpx.Client) -> None:
    # Metadata is stored and compared as strings: a number could never match, so it is refused.
    number, text = {"year": 2024}, {"year": "2024"}
    refused(admin.post("/search", json={"query": "relief valve", "metadata": number}), "metadata.year")
    refused(admin.post("/chat", json={"question": "Valves?", "metadata": number}), "metadata.year")
    ok = admin.post("/search", json={"query": "relief valve", "metadata": text})
    assert ok.status_code == 200, ok.text


@pytest.mark.parametrize("body", [{"role": "reader"}, {"role": "reader", "scopes": []}])
def test_a_reader_key_needs_a_scope_or_all_scopes(admin: httpx.Client, body: dict[str, Any]) -> None:
    # As `citeline keys create --role reader` without --scope: an empty list is no more of an answer.
    message = refused(admin.post("/keys", json=body), "scopes", "all_scopes")
    assert "at least one" in message


@pytest.mark.parametrize(
    ("path", "body", "named"),
    [
        ("/search", {"query": "relief valve", "top_k": True}, "body.top_k"),
        ("/search", {"query": "relief valve", "n_results": True}, "body.n_results"),
        ("/search", {"query": "relief valve", "top_k": "5"}, "body.top_k"),
        ("/search", {"query": "relief valve", "top_k": 1.0}, "body.top_k"),
        ("/search", {"query": "relief valve", "candidates": True}, "body.candidates"),
        ("/search", {"query": "relief valve", "distance_threshold": True}, "body.distance_threshold"),
        ("/search", {"query": "relief valve", "mmr_lambda": False}, "body.mmr_lambda"),
        ("/chat", {"question": "When does the relief valve open?", "top_k": True}, "body.top_k"),
        ("/chat/stream", {"question": "When does the relief valve open?", "top_k": True}, "body.top_k"),
        ("/documents", {"url": "https://example.org/valves", "chunk_size": True}, "body.chunk_size"),
        ("/documents", {"url": "https://example.org/valves", "chunk_overlap": False}, "body.chunk_overlap"),
    ],
)
def test_a_number_field_takes_only_a_json_number(
    admin: httpx.Client, path: str, body: dict[str, Any], named: str
) -> None:
    # `"top_k": true` was a search for one result, and `"mmr_lambda": false` a weight of 0.0.
    refused(admin.post(path, json=body), named, "Input should be a valid")


def test_a_number_field_still_takes_numbers(admin: httpx.Client) -> None:
    body = {"query": "relief valve", "top_k": 2, "candidates": 50, "distance_threshold": 2, "mmr_lambda": 0.5}
    found = admin.post("/search", json=body)
    assert found.status_code == 200, found.text
    assert found.json()["count"] == 2


#: Each boolean field of every body, with a request that would be valid but for it.
FLAGS = [
    ("/documents", {"url": "https://example.org/valves"}, "index"),
    ("/refresh", {}, "dry_run"),
    ("/keys", {"role": "reader", "scopes": ["acme"]}, "all_scopes"),
]


@pytest.mark.parametrize("value", ["false", "true", "False", "yes", "off", 0, 1, 0.0, [], {}])
@pytest.mark.parametrize(("path", "body", "flag"), FLAGS, ids=[flag for _, _, flag in FLAGS])
def test_a_boolean_field_takes_only_json_true_or_false(
    admin: httpx.Client, path: str, body: dict[str, Any], flag: str, value: Any
) -> None:
    # pydantic read "off" and 0 as false, "yes" and 1 as true: `"index": "no"` built the page anyway
    # would have been a guess either way, so it is refused, naming the flag.
    refused(admin.post(path, json={**body, flag: value}), f"body.{flag}", "Input should be a valid boolean")


def test_every_boolean_field_of_every_body_is_tested_here() -> None:
    # A flag a route adds is strict by RequestBody alone; this list keeps it tested over HTTP too.
    import citeline.api.app  # noqa: F401  (imports every route, so every body model exists)
    from citeline.api.bodies import RequestBody

    def bodies(model: type[RequestBody]) -> list[type[RequestBody]]:
        return [model, *(sub for direct in model.__subclasses__() for sub in bodies(direct))]

    flags = {
        (model.__name__, name)
        for model in bodies(RequestBody)
        for name, field in model.model_fields.items()
        if field.annotation in (bool, bool | None)
    }
    assert {name for _, name in flags} == {flag for _, _, flag in FLAGS}, flags


def test_a_boolean_field_still_takes_true_and_false(admin: httpx.Client) -> None:
    for dry_run in (True, False):
        # Nothing was read 100000 weeks ago: no document is read again, dry run or not.
        ran = admin.post("/refresh", json={"dry_run": dry_run, "older_than": "100000w"})
        assert ran.status_code == 202 and ran.json()["dry_run"] is dry_run, ran.text
    everything = admin.post("/keys", json={"role": "reader", "all_scopes": True, "name": "flag test"})
    assert everything.status_code == 201 and everything.json()["scopes"] is None, everything.text
    scoped = admin.post("/keys", json={"role": "reader", "scopes": ["acme"], "all_scopes": False})
    assert scoped.status_code == 201 and scoped.json()["scopes"] == ["acme"], scoped.text


@pytest.mark.parametrize("path", ["/search", "/chat", "/chat/stream", "/keys", "/refresh"])
def test_a_body_that_is_not_json_says_so_and_where(admin: httpx.Client, path: str) -> None:
    # FastAPI's own words were `body.9: JSON decode error`: a field named `9`, and no reason.
    body = b'{"query": }' if path == "/search" else b'{"x": }'
    message = refused(admin.post(path, content=body, headers={"Content-Type": "application/json"}), "body")
    assert "Invalid JSON at character" in message and "character" in message and "Expecting value" in message
    assert "body.9" not in message and "body.7" not in message


@pytest.mark.parametrize(
    ("content_type", "named"),
    [
        ("application/x-www-form-urlencoded", "application/x-www-form-urlencoded"),
        ("text/plain", "text/plain"),
        (None, "no Content-Type"),
    ],
)
def test_a_json_route_sent_another_content_type_names_what_it_takes_and_what_it_got(
    admin: httpx.Client, content_type: str | None, named: str
) -> None:
    # The answer was `body: Input should be a valid dictionary or object to extract fields from`,
    # whatever was sent: a client posting a form, or JSON without its header, could not tell why.
    headers = {"Content-Type": content_type} if content_type else {}
    # httpx sends raw bytes without a Content-Type unless told one.
    response = admin.post("/search", content=b'{"query": "relief valve"}', headers=headers)
    message = refused(response, "body")
    assert "POST /search takes JSON" in message and "application/json" in message and named in message
