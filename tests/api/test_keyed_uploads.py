"""Keyed uploads over HTTP: a file sent under a key the client keeps for it (``source``, e.g. its path
in a folder kept in sync) is one document, whatever it was sent as before; and a file without an
extension is recognised from its first bytes, as ``citeline ingest`` recognises one."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import Server, add_keys, base_env, start_server, stop_server
from tests.api.test_documents_write import PUMP_V1, PUMP_V2, own_key, poll, upload


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, fresh_data_dir: Callable[[str], Path]
) -> Iterator[Server]:
    """A server of these tests' own: the keys they upload under are theirs."""
    env = base_env(fresh_data_dir("citeline-keyed-"), CITELINE_LLM="extractive")
    started = start_server(env, tmp_path_factory.mktemp("keyed-log") / "serve.log")
    try:
        add_keys(started, env, {"reader": ["acme"], "other": ["globex"]})
        yield started
    finally:
        stop_server(started)


def test_an_upload_under_a_source_key_is_one_document_sent_again_and_again(server: Server) -> None:
    """A folder kept in sync: each file sent under its path in the folder (``source``), whatever it was
    sent as before; the client keeps no file-to-document map."""
    key = "runbooks/failover.md"
    with own_key(server, "admin") as admin:
        first = upload(admin, "failover.md", PUMP_V1.encode(), source=key, scopes="acme")
        assert first.status_code == 202, first.text
        made = first.json()
        assert (made["source"], made["source_uri"]) == (key, f"upload-key:{key}")
        assert poll(admin, made["id"])["status"] == "completed"
        same = upload(admin, "failover.md", PUMP_V1.encode(), source=key)
        assert same.status_code == 200, same.text
        assert (same.json()["id"], same.json()["outcome"]) == (made["id"], "unchanged")
        changed = upload(admin, "failover-v2.md", PUMP_V2.encode(), source=key, tags="pump")
        assert changed.status_code == 202, changed.text
        assert changed.json()["id"] == made["id"]
        done = poll(admin, made["id"])
        # The new version takes the new file's name and the labels given; those left out are kept.
        assert (done["version"], done["name"], done["tags"], done["scopes"]) == (
            2,
            "failover-v2.md",
            ["pump"],
            ["acme"],
        )
        # The same bytes sent without a source, or under another, are other documents.
        plain = upload(admin, "failover.md", PUMP_V2.encode()).json()
        other = upload(admin, "failover.md", PUMP_V2.encode(), source="failover.md").json()
        assert len({made["id"], plain["id"], other["id"]}) == 3
        assert plain["source"] is None and other["source"] == "failover.md"
        listed = admin.get("/documents", params={"source": key}).json()
        assert [d["id"] for d in listed["documents"]] == [made["id"]] and listed["total"] == 1
        # Re-ingest rebuilds the stored original; refresh has no origin to read again.
        assert admin.post(f"/documents/{made['id']}/reingest").status_code == 202
        assert poll(admin, made["id"])["version"] == 3
        dry = admin.post("/refresh", json={"dry_run": True, "document_ids": [made["id"]]}).json()
        assert "uploaded" in dry["documents"][0]["refresh_problem"]
        for doc in (made, plain, other):
            poll(admin, doc["id"])
            assert admin.delete(f"/documents/{doc['id']}").status_code == 200
        # Deleted, its source is free: the next upload under it is a new document.
        again = upload(admin, "failover.md", PUMP_V1.encode(), source=key, index="false")
        assert again.status_code == 202 and again.json()["id"] != made["id"]
        assert admin.delete(f"/documents/{again.json()['id']}").status_code == 200


def test_a_key_is_one_key_in_either_unicode_form_of_its_name(server: Server) -> None:
    # macOS writes "Café" decomposed, Linux composed: one folder synced from both is one set of files.
    composed, decomposed = "notes/Caf\u00e9.md", "notes/Cafe\u0301.md"
    with own_key(server, "admin") as admin:
        made = upload(admin, "cafe.md", PUMP_V1.encode(), source=composed).json()
        assert made["source"] == composed
        assert poll(admin, made["id"])["status"] == "completed"
        again = upload(admin, "cafe.md", PUMP_V1.encode(), source=decomposed)
        assert again.status_code == 200, again.text
        assert (again.json()["id"], again.json()["outcome"]) == (made["id"], "unchanged")
        listed = admin.get("/documents", params={"source": decomposed}).json()
        assert [d["id"] for d in listed["documents"]] == [made["id"]]
        assert admin.delete(f"/documents/{made['id']}").status_code == 200


def test_a_source_and_a_document_id_must_name_the_same_document(server: Server) -> None:
    with own_key(server, "admin") as admin:
        a = upload(admin, "a.md", b"# A\n\nValve A opens at 3 bar.", source="sync/a.md").json()
        b = upload(admin, "b.md", b"# B\n\nValve B opens at 4 bar.", source="sync/b.md").json()
        for doc in (a, b):
            poll(admin, doc["id"])
        clash = upload(
            admin, "a.md", b"# A\n\nValve A opens at 5 bar.", source="sync/a.md", document_id=b["id"]
        )
        assert clash.status_code == 409, clash.text
        message = clash.json()["error"]["message"]
        assert "source" in message and "document_id" in message
        assert a["id"] in message and b["id"] in message
        agreed = upload(
            admin, "a.md", b"# A\n\nValve A opens at 3 bar.", source="sync/a.md", document_id=a["id"]
        )
        assert agreed.status_code == 200 and agreed.json()["outcome"] == "unchanged"
        # A document uploaded without a source takes one when sent with its id: the way to a synced folder.
        plain = upload(admin, "c.md", b"# C\n\nValve C opens at 6 bar.").json()
        poll(admin, plain["id"])
        adopted = upload(
            admin, "c.md", b"# C\n\nValve C opens at 6 bar.", source="sync/c.md", document_id=plain["id"]
        )
        assert adopted.status_code in (200, 202), adopted.text
        assert (adopted.json()["id"], adopted.json()["source"]) == (plain["id"], "sync/c.md")
        # Sent again by its id alone, a keyed document keeps its source.
        by_id = upload(admin, "c.md", b"# C\n\nValve C opens at 7 bar.", document_id=plain["id"])
        assert by_id.status_code == 202 and by_id.json()["source"] == "sync/c.md"
        for doc in (a, b, plain):
            poll(admin, doc["id"])
            assert admin.delete(f"/documents/{doc['id']}").status_code == 200


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("", "source"),
        ("   ", "source"),
        ("a\x00b", "source"),
        ("runbooks/\nfailover.md", "source"),
        ("x" * 1025, "1024"),
    ],
)
def test_a_source_that_is_no_key_is_refused_naming_the_field(server: Server, source: str, says: str) -> None:
    with server.as_("admin") as admin:
        refused = upload(admin, "k.md", b"# K\n\ntext", source=source)
    assert refused.status_code == 422, refused.text
    message = refused.json()["error"]["message"]
    assert "source" in message and says in message


def test_a_source_is_seen_within_the_key_s_scopes_only(server: Server) -> None:
    with own_key(server, "admin") as admin:
        made = upload(
            admin, "acme-sync.md", b"# S\n\nThe ACME pump runs at 40 Hz.", source="acme/s.md", scopes="acme"
        )
        doc = made.json()
        with server.as_("reader") as reader:
            seen = reader.get("/documents", params={"source": "acme/s.md"}).json()["documents"]
            assert [d["id"] for d in seen] == [doc["id"]]
            # A reader cannot upload under a source, and is told nothing of the document holding it.
            refused = upload(reader, "acme-sync.md", b"other", source="acme/s.md")
            assert refused.status_code == 403 and doc["id"] not in refused.text
        with server.as_("other") as other:
            assert other.get("/documents", params={"source": "acme/s.md"}).json()["documents"] == []
        poll(admin, doc["id"])
        assert admin.delete(f"/documents/{doc['id']}").status_code == 200


def test_one_synced_folder_is_listed_by_the_prefix_of_its_keys(server: Server) -> None:
    """Several folders synced into one server, each under its own prefix: listing one folder finds the
    documents whose file is gone. The prefix is literal (``_`` and ``%`` are characters of a key), in
    either Unicode form, and a key sees its own documents only."""
    sent = {
        "handbook/pumps.md": "acme",
        "handbook/valves/v1.md": "acme",
        "handbook_old/x.md": "acme",
        "handbooks/y.md": "acme",
        "policies/leave.md": "globex",
        "Caf\u00e9/menu.md": "acme",
    }
    with own_key(server, "admin") as admin:
        made = {
            key: upload(admin, key, f"# {key}\n\nText of {key}.".encode(), source=key, scopes=scope).json()
            for key, scope in sent.items()
        }

        def sources(client: httpx.Client, prefix: str) -> list[str]:
            got = client.get("/documents", params={"source_prefix": prefix, "limit": 1000})
            assert got.status_code == 200, got.text
            assert got.json()["total"] == len(got.json()["documents"])
            return sorted(d["source"] for d in got.json()["documents"])

        assert sources(admin, "handbook/") == ["handbook/pumps.md", "handbook/valves/v1.md"]
        assert sources(admin, "handbook_") == ["handbook_old/x.md"]
        assert sources(admin, "Cafe\u0301/") == ["Caf\u00e9/menu.md"]
        assert set(sources(admin, "")) >= set(sent)
        with server.as_("reader") as reader:
            assert sources(reader, "policies/") == []
            assert sources(reader, "handbook/") == ["handbook/pumps.md", "handbook/valves/v1.md"]
        with server.as_("other") as other:
            assert sources(other, "") == ["policies/leave.md"]
        for doc in made.values():
            poll(admin, doc["id"])
            assert admin.delete(f"/documents/{doc['id']}").status_code == 200


def test_an_uploaded_file_without_an_extension_is_recognised_from_its_first_bytes(server: Server) -> None:
    page = (
        b"<!-- saved from url=(0014)about:internet -->\n<!DOCTYPE html><html><head><title>Pump P-4</title>"
        b"</head><body><main><h1>Pump P-4</h1><p>The P-4 pump runs at 40 Hz and is primed with clean "
        b"water before it is started.</p></main></body></html>"
    )
    with own_key(server, "admin") as admin:
        for name, data, content_type in (
            ("README", b"The P-4 pump is primed before it is started.", "text/plain"),
            ("saved-page", page, "text/html"),
        ):
            sent = upload(admin, name, data)
            assert sent.status_code == 202, sent.text
            assert sent.json()["content_type"] == content_type
            done = poll(admin, sent.json()["id"])
            assert (done["status"], done["name"], done["content_type"]) == ("completed", name, content_type)
            assert admin.delete(f"/documents/{done['id']}").status_code == 200
