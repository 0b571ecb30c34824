"""Access grants: a reader bound to scopes sees its scopes and universal documents, on every read."""

from __future__ import annotations

import io
import uuid
from pathlib import Path

import pytest

from citeline.access import Access, Role
from citeline.engine import Citeline
from citeline.errors import AccessDeniedError, InvalidRequestError, NotFoundError
from citeline.ingest import IngestOptions
from citeline.jobs.submit import Upload
from citeline.retrieve.filters import Filters
from citeline.retrieve.search import SearchRequest
from tests.conftest import write

QUERY = "how is the infusion pump primed?"


def test_a_request_narrows_a_reader_and_never_widens_it() -> None:
    reader = Access.reader({"ward-a", "ward-b"}, "k1")
    assert reader.restrict(Filters()).scopes == ("ward-a", "ward-b")
    assert reader.restrict(Filters(scopes=("ward-a",))).scopes == ("ward-a",)
    # Asking for a scope the key lacks leaves the intersection: nothing but universal documents.
    assert reader.restrict(Filters(scopes=("ward-c",))).scopes == ()
    assert reader.restrict(Filters(scopes=("ward-a", "ward-c"))).scopes == ("ward-a",)


def test_an_admin_grant_filters_nothing_it_was_not_asked_to() -> None:
    admin = Access.admin()
    assert admin.restrict(Filters()).scopes is None
    assert admin.restrict(Filters(scopes=("x",))).scopes == ("x",)
    assert admin.is_admin and admin.unrestricted and admin.role is Role.ADMIN


def test_an_admin_cannot_be_bound_to_scopes() -> None:
    with pytest.raises(InvalidRequestError):
        Access(Role.ADMIN, frozenset({"a"}))


def test_empty_scopes_mean_universal_only_not_everything() -> None:
    assert Filters(scopes=()).sql()[0].count("cardinality(d.scopes) = 0") == 1
    assert not Filters(scopes=()).is_empty and Filters().is_empty


@pytest.fixture
def wards(cl: Citeline, tmp_path: Path) -> Citeline:
    cl.ingest(
        [write(tmp_path / "a.txt", "Ward A primes the infusion pump with saline before each use.")],
        IngestOptions(scopes=("ward-a",)),
    )
    cl.ingest(
        [write(tmp_path / "b.txt", "Ward B primes the infusion pump with glucose before each use.")],
        IngestOptions(scopes=("ward-b",)),
    )
    cl.ingest([write(tmp_path / "all.txt", "Every ward flushes the infusion pump line after use.")])
    return cl


def _names(cl: Citeline, access: Access, filters: Filters | None = None) -> set[str]:
    request = SearchRequest(QUERY, filters=filters or Filters(), top_k=10)
    return {h.document_name for h in cl.search(request, access=access)}


def test_a_reader_searches_its_scopes_and_universal_documents(wards: Citeline) -> None:
    reader = Access.reader({"ward-a"}, "k1")
    assert _names(wards, reader) == {"a.txt", "all.txt"}
    assert _names(wards, reader, Filters(scopes=("ward-b",))) == {"all.txt"}
    assert _names(wards, Access.reader(set(), "k2")) == {"all.txt"}
    assert _names(wards, Access.admin()) == {"a.txt", "b.txt", "all.txt"}


def test_a_reader_cannot_fetch_list_or_open_another_scopes_document(wards: Citeline) -> None:
    reader = Access.reader({"ward-a"}, "k1")
    everything = wards.search(SearchRequest(QUERY, top_k=10))
    b_chunks = [h.chunk_id for h in everything if h.document_name == "b.txt"]
    assert b_chunks and wards.fetch(b_chunks, access=reader) == []
    assert wards.fetch(b_chunks) != []
    assert {d.name for d in wards.documents(access=reader)} == {"a.txt", "all.txt"}
    b = next(d for d in wards.documents() if d.name == "b.txt")
    with pytest.raises(NotFoundError):
        wards.document(str(b.id), access=reader)
    with pytest.raises(NotFoundError):
        wards.document(str(b.id)[:8], access=reader)
    with pytest.raises(NotFoundError):
        wards.chunks(b, access=reader)
    stats = wards.stats(access=reader)
    assert stats["active_documents"] == 2 and "database_bytes" not in stats
    assert wards.stats()["active_documents"] == 3


def test_a_reader_may_not_delete(wards: Citeline) -> None:
    a = next(d for d in wards.documents() if d.name == "a.txt")
    with pytest.raises(AccessDeniedError):
        wards.delete(str(a.id), access=Access.reader({"ward-a"}, "k1"))
    assert any(d.name == "a.txt" for d in wards.documents())


def test_a_reader_sees_only_the_versions_of_its_scopes_however_the_document_changed(wards: Citeline) -> None:
    """A replacement upload labels its new version only, so the versions of one document may carry
    different scopes; each version is seen by the grants of its own scopes, as a document is."""
    reader = Access.reader({"ward-a"}, "k1")
    # A Ward B upload that failed, replaced by a Ward A version: with no active version, the current
    # one is the newest, Ward A's; the failed one is kept.
    b = wards.submit(Upload("b-draft.txt", io.BytesIO(b"")), IngestOptions(scopes=("ward-b",))).document
    wards.ingestor().run_jobs(limit=1, version_ids=[b.version_id])
    replaced = wards.submit(
        Upload("a-now.txt", io.BytesIO(b"Ward A now primes the pump with water.")),
        IngestOptions(scopes=("ward-a",)),
        document_id=b.id,
        index=False,
    ).document
    assert wards.document(str(b.id), access=reader).version == replaced.version == 2
    assert wards.document(str(b.id), version=1).status == "failed"
    # And a Ward A document with a Ward B replacement waiting (pending), its current version still A's.
    a = next(d for d in wards.documents() if d.name == "a.txt")
    waiting = wards.submit(
        Upload("b-next.txt", io.BytesIO(b"Ward B will prime it with glucose.")),
        IngestOptions(scopes=("ward-b",)),
        document_id=a.id,
        index=False,
    ).document
    assert waiting.version == 2 and wards.document(str(a.id), access=reader).version == 1
    for doc, hidden, shown in ((b, 1, 2), (a, 2, 1)):
        assert wards.document(str(doc.id), access=reader, version=shown).scopes == ["ward-a"]
        with pytest.raises(NotFoundError) as refused:
            wards.document(str(doc.id), access=reader, version=hidden)
        with pytest.raises(NotFoundError) as absent:
            wards.document(str(doc.id), access=reader, version=7)
        # Refused as a version the catalog does not hold, in the same words.
        assert str(refused.value) == str(absent.value).replace("version 7", f"version {hidden}")
        assert [v.version for v in wards.versions(doc.id, access=reader)] == [shown]
        assert [v.version for v in wards.versions(doc.id)] == [1, 2]
        assert wards.document(str(doc.id), version=hidden).scopes == ["ward-b"]


def test_a_document_out_of_reach_is_not_found_in_the_words_of_one_that_does_not_exist(
    wards: Citeline,
) -> None:
    reader = Access.reader({"ward-a"}, "k1")
    b = str(next(d for d in wards.documents() if d.name == "b.txt").id)
    missing = str(uuid.UUID(int=7))
    for hidden, unknown in ((b, missing), (b[:8], missing[:8]), (b.upper(), missing.upper())):
        with pytest.raises(NotFoundError) as refused:
            wards.document(hidden, access=reader)
        with pytest.raises(NotFoundError) as absent:
            wards.document(unknown, access=reader)
        assert str(refused.value).replace(hidden, "ID") == str(absent.value).replace(unknown, "ID")
        assert str(refused.value) == f"no document with id {hidden!r}"
