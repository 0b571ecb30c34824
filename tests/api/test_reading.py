"""Search results, document listing, files, page text and chunks, as a client reads them."""

from __future__ import annotations

import pytest

from tests.api.conftest import SAMPLE_PDF, Server, ingest
from tests.conftest import write

RESULT_FIELDS = {
    "document_id",
    "document_name",
    "version",
    "chunk_id",
    "chunk_index",
    "page",
    "start",
    "end",
    "text",
    "distance",
    "similarity",
    "relevance",
    "keyword_score",
    "fused_score",
    "url",
    "also_in",
}


def test_a_search_result_carries_its_source_scores_and_a_link_to_the_page(server: Server) -> None:
    with server.as_("admin") as client:
        body = client.post("/search", json={"query": "When does the ACME valve open?", "n_results": 2}).json()
    assert body["count"] == len(body["results"]) == 2
    best = body["results"][0]
    assert set(best) >= RESULT_FIELDS
    assert best["document_id"] == server.documents["acme_note"] and "6 bar" in best["text"]
    assert best["relevance"] == pytest.approx(1 / (1 + best["distance"]))
    assert best["similarity"] == pytest.approx(1 - best["distance"])
    assert best["url"] == f"/documents/{best['document_id']}/file#page={best['page']}"
    assert best["also_in"] == []  # no other document holds this passage word for word


@pytest.mark.parametrize(
    ("caller", "query", "sees", "never"),
    [
        ("reader", "relief valve opens at bar", {"acme_note", "universal"}, {"globex"}),
        ("other", "relief valve opens at bar", {"globex", "universal"}, {"acme_note", "acme"}),
        # A reader may narrow its scopes, never widen them: another scope leaves universal documents only.
        ("reader", "relief valve opens at bar&scope=globex", {"universal"}, {"globex", "acme_note", "acme"}),
        ("admin", "relief valve opens at bar&scope=globex", {"globex", "universal"}, {"acme_note"}),
    ],
)
def test_search_stays_within_the_keys_scopes(
    server: Server, caller: str, query: str, sees: set[str], never: set[str]
) -> None:
    with server.as_(caller) as client:
        response = client.get(f"/search?q={query}&n=10")
    assert response.status_code == 200, response.text
    found = {r["document_id"] for r in response.json()["results"]}
    assert {server.documents[d] for d in sees} <= found
    assert not {server.documents[d] for d in never} & found


def test_search_and_chat_filter_by_a_whole_document_id_or_a_unique_prefix(server: Server) -> None:
    mine, hidden = server.documents["acme_note"], server.documents["globex"][:8]
    with server.as_("reader") as client:
        whole = client.post("/search", json={"query": "relief valve", "document_ids": [mine]})
        short = client.post("/search", json={"query": "relief valve", "document_ids": [mine[:8]]})
        # A prefix of a document outside the key's scopes is refused as GET /documents/{prefix} is.
        path = client.get(f"/documents/{hidden}")
        search = client.post("/search", json={"query": "relief valve", "document_ids": [hidden]})
        chat = client.post("/chat", json={"question": "When does the valve open?", "document_ids": [hidden]})
    assert short.status_code == 200, short.text
    assert short.json()["results"] == whole.json()["results"] != []
    assert {r["document_id"] for r in short.json()["results"]} == {mine}
    assert path.status_code == search.status_code == chat.status_code == 404
    refused = {r.json()["error"]["message"] for r in (path, search, chat)}
    assert refused == {f"no document with id '{hidden}'"}


def test_get_search_filters_by_category_and_tag(server: Server) -> None:
    with server.as_("admin") as client:
        boilers = client.get("/search?q=relief valve&category=plant/boilers").json()["results"]
        tagged = client.get("/search?q=relief valve&tag=safety&n=20").json()["results"]
    assert {r["document_id"] for r in boilers} == {server.documents["globex"]}
    assert {r["document_id"] for r in tagged} <= {server.documents["acme_note"], server.documents["acme"]}


def test_the_document_listing_filters_pages_and_counts(server: Server) -> None:
    with server.as_("admin") as client:
        everything = client.get("/documents").json()
        acme = client.get("/documents?scope=acme&limit=1").json()
        second = client.get("/documents?scope=acme&limit=1&offset=1").json()
        pdfs = client.get("/documents?content_type=application/pdf").json()
        named = client.get("/documents?name_contains=BOILER&status=completed").json()
        below = client.get("/documents?category=plant").json()
        failed = client.get("/documents?status=failed").json()
    assert everything["total"] == 4 and len(everything["documents"]) == 4
    assert acme["total"] == 2 and len(acme["documents"]) == 1
    assert {acme["documents"][0]["id"], second["documents"][0]["id"]} == {
        server.documents["acme"],
        server.documents["acme_note"],
    }
    assert [d["id"] for d in pdfs["documents"]] == [server.documents["acme"]]
    assert [d["id"] for d in named["documents"]] == [server.documents["globex"]]
    assert below["total"] == 3  # both acme documents (plant/valves) and globex (plant/boilers)
    assert failed == {"documents": [], "total": 0, "limit": 50, "offset": 0}
    assert all("file_path" not in d for d in everything["documents"])


def test_a_reader_lists_only_what_its_scopes_see(server: Server) -> None:
    with server.as_("other") as client:
        listing = client.get("/documents").json()
        stats = client.get("/stats").json()
    assert {d["id"] for d in listing["documents"]} == {
        server.documents["globex"],
        server.documents["universal"],
    }
    assert stats["documents"] == 2


def test_the_file_is_the_stored_original_and_honours_ranges(server: Server) -> None:
    original = SAMPLE_PDF.read_bytes()
    path = f"/documents/{server.documents['acme']}/file"
    with server.as_("reader") as client:
        whole = client.get(path)
        part = client.get(path, headers={"Range": "bytes=100-199"})
    assert whole.status_code == 200 and whole.content == original
    assert whole.headers["content-type"] == "application/pdf"
    assert whole.headers["accept-ranges"] == "bytes"
    assert part.status_code == 206 and part.content == original[100:200]
    assert part.headers["content-range"] == f"bytes 100-199/{len(original)}"


def test_head_on_the_file_answers_the_headers_of_get_without_the_body(server: Server) -> None:
    # What a browser or a download tool asks first (size, type, name, ranges); it was a 405.
    path = f"/documents/{server.documents['acme']}/file"
    with server.as_("reader") as client:
        whole, head = client.get(path), client.head(path)
        part = client.head(path, headers={"Range": "bytes=100-199"})
        missing = client.head("/documents/00000000-0000-0000-0000-000000000000/file")
    assert head.status_code == 200 and head.content == b""
    for name in (
        "content-type",
        "content-length",
        "content-disposition",
        "accept-ranges",
        "etag",
        "last-modified",
    ):
        assert head.headers[name] == whole.headers[name], name
    assert int(head.headers["content-length"]) == len(whole.content)
    assert part.status_code == 206 and part.content == b""
    assert part.headers["content-range"] == f"bytes 100-199/{len(whole.content)}"
    assert missing.status_code == 404 and missing.content == b""


def test_page_text_holds_every_chunk_of_the_page_at_its_offsets(server: Server) -> None:
    doc = server.documents["acme"]
    with server.as_("reader") as client:
        chunks = client.get(f"/documents/{doc}/chunks?limit=1000").json()
        page = client.get(f"/documents/{doc}/pages/2").json()
        beyond = client.get(f"/documents/{doc}/pages/99")
    on_page = [c for c in chunks["chunks"] if c["page"] == 2]
    assert on_page and page["page"] == 2
    for chunk in on_page:
        assert page["text"][chunk["start"] : chunk["end"]] == chunk["text"]
    assert beyond.status_code == 404 and beyond.json()["error"]["code"] == "not_found"


def test_chunks_are_paged_in_order_with_their_total(server: Server) -> None:
    doc = server.documents["acme"]
    with server.as_("admin") as client:
        everything = client.get(f"/documents/{doc}/chunks?limit=1000").json()
        page = client.get(f"/documents/{doc}/chunks?limit=2&offset=1").json()
    assert everything["total"] == len(everything["chunks"]) >= 3
    assert [c["index"] for c in everything["chunks"]] == list(range(everything["total"]))
    assert page["chunks"] == everything["chunks"][1:3] and page["total"] == everything["total"]
    assert {"chunk_id", "index", "page", "start", "end", "text"} <= set(page["chunks"][0])


def test_an_admin_deletes_a_document_through_the_index_alias(
    server: Server, tmp_path_factory: pytest.TempPathFactory
) -> None:
    note = write(tmp_path_factory.mktemp("doomed") / "doomed.md", "A document that is about to be deleted.")
    doc = ingest(server.env, note)["doomed.md"]
    with server.as_("reader") as reader:
        assert reader.delete(f"/index/{doc}").status_code == 403
    with server.as_("admin") as admin:
        deleted = admin.delete(f"/index/{doc}")
        after = admin.get(f"/documents/{doc}")
    assert deleted.status_code == 200
    assert deleted.json() == {"deleted": [doc], "versions": 1, "name": "doomed.md"}
    assert after.status_code == 404
