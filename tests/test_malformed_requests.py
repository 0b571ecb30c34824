"""A request that holds a NUL character (``\\x00``) in any of its texts is the caller's mistake, whichever
shell it comes through (API, CLI, web, a worker, a Python script): the library refuses it with an
:class:`InvalidRequestError` that names the field and says why, before anything is stored.

PostgreSQL can neither store nor compare a NUL; the database's own error used to come back instead.
"""

from __future__ import annotations

import asyncio
import io
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa

from citeline.access import Access, Role
from citeline.chat.session import ChatSession, conversations, delete_conversation
from citeline.checks import NUL_MESSAGE
from citeline.engine import Citeline
from citeline.errors import InvalidRequestError
from citeline.ingest import IngestOptions
from citeline.jobs.submit import Upload
from citeline.retrieve.filters import Filters
from citeline.retrieve.search import SearchRequest
from citeline.settings import Settings
from citeline.store.bulk import PreparedChunk, PreparedDocument
from citeline.store.catalog import DocumentQuery, Labels
from citeline.store.database import schema_name
from tests.conftest import write

NUL = "a\x00b"


@pytest.fixture(scope="module")
def library(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Citeline]:
    """One namespace with a labelled document, a reader key and a conversation, for every case."""
    settings = Settings(data_dir=data_dir, namespace=f"t_{uuid.uuid4().hex[:12]}", database_url=None)
    with Citeline(settings) as cl:
        folder = tmp_path_factory.mktemp("malformed")
        labels = IngestOptions(
            scopes=("plant",), category="Engineering", tags=("valves",), metadata={"site": "north"}
        )
        cl.ingest([write(folder / "valves.md", "# Valves\n\nThe relief valve opens at 6 bar.")], labels)
        cl.create_key(Role.READER, ["plant"], name="plant reader")
        asyncio.run(_ask(cl.chat(), "When does the relief valve open?"))
        yield cl
        with cl.engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema_name(settings.namespace)}" CASCADE'))


async def _ask(session: ChatSession, question: str, **kwargs: Any) -> None:
    async for _ in session.ask(question, **kwargs):
        pass


def stored(cl: Citeline) -> dict[str, Any]:
    """What the namespace holds that a request could change: every document version with its labels,
    the keys, the conversations listed and their messages, the stored originals."""
    versions = [
        (d.version_id, d.name, d.status, d.category, d.tags, d.scopes, d.metadata, d.is_active)
        for d in cl.documents()
    ]
    listed = conversations(cl)
    with cl.engine.connect() as conn:
        messages = conn.execute(sa.text("SELECT count(*) FROM messages")).scalar_one()
    return {
        "documents": sorted(versions, key=str),
        "keys": [(k.id, k.name, k.scopes, k.revoked_at) for k in cl.api_keys(include_revoked=True)],
        "conversations": [(c.id, c.title) for c in listed],
        "messages": messages,
        "files": sorted(p.name for p in cl.files_dir.rglob("*")) if cl.files_dir.is_dir() else [],
    }


def document_id(cl: Citeline) -> str:
    return str(cl.documents()[0].id)


def searched(filters: Callable[[], Filters]) -> Callable[[Citeline], object]:
    return lambda cl: cl.search(SearchRequest("relief valve", filters()))


def prepared(**fields: Any) -> list[PreparedDocument]:
    chunk = PreparedChunk(fields.pop("text", "The relief valve opens at 6 bar."))
    document = {"source_uri": "bulk:valves", "name": "valves.txt", "chunks": [chunk], **fields}
    return [PreparedDocument(vectors=np.zeros((1, 384), np.float32), **document)]


CASES: list[tuple[str, Callable[[Citeline], object], str]] = [
    # Searching: the query, every filter, the reranker.
    ("search query", lambda cl: cl.search(NUL), "query"),
    ("search scopes", searched(lambda: Filters(scopes=("plant", NUL))), "filters.scopes[1]"),
    ("search category", searched(lambda: Filters(category=NUL)), "filters.category"),
    ("search any tag", searched(lambda: Filters(tags_any=(NUL,))), "filters.tags_any[0]"),
    ("search every tag", searched(lambda: Filters(tags_all=(NUL,))), "filters.tags_all[0]"),
    ("search content type", searched(lambda: Filters(content_types=(NUL,))), "filters.content_types[0]"),
    ("search metadata value", searched(lambda: Filters(metadata={"site": NUL})), "filters.metadata['site']"),
    (
        "search metadata key",
        searched(lambda: Filters(metadata={NUL: "north"})),
        r"filters.metadata['a\x00b']",
    ),
    ("search model number", searched(lambda: Filters(model_numbers=(NUL,))), "filters.model_numbers[0]"),
    ("search section type", searched(lambda: Filters(section_types=(NUL,))), "filters.section_types[0]"),
    ("search reranker", lambda cl: cl.search(SearchRequest("relief valve", rerank=NUL)), "rerank"),
    # Asking: the question, its filters, the conversation it goes to.
    ("ask question", lambda cl: asyncio.run(_ask(cl.chat(), f"When? {NUL}")), "question"),
    (
        "ask filters",
        lambda cl: asyncio.run(_ask(cl.chat(), "When?", filters=Filters(category=NUL))),
        "filters.category",
    ),
    ("resume conversation", lambda cl: cl.chat(NUL), "conversation id"),
    ("read conversation", lambda cl: cl.conversation(NUL), "conversation id"),
    ("delete conversation", lambda cl: delete_conversation(cl, NUL), "conversation id"),
    # Adding documents: the paths, the upload's name, the address, the labels.
    ("ingest path", lambda cl: cl.ingest([f"/tmp/{NUL}.md"]), "paths[0]"),
    ("ingest scopes", lambda cl: cl.ingest([], IngestOptions(scopes=(NUL,))), "scopes[0]"),
    ("ingest category", lambda cl: cl.ingest([], IngestOptions(category=NUL)), "category"),
    ("ingest tags", lambda cl: cl.ingest([], IngestOptions(tags=("valves", NUL))), "tags[1]"),
    ("ingest metadata", lambda cl: cl.ingest([], IngestOptions(metadata={"site": NUL})), "metadata['site']"),
    ("ingest uploader", lambda cl: cl.ingest([], IngestOptions(uploaded_by=NUL)), "uploaded_by"),
    ("upload name", lambda cl: cl.submit(Upload(f"{NUL}.md", io.BytesIO(b"# Pumps"))), "upload.name"),
    ("web page address", lambda cl: cl.submit_url(f"https://example.com/{NUL}"), "url"),
    # (A NUL in a chunk's text is cleaned, as in any text to index: tests/store/test_bulk.py.)
    (
        "bulk labels",
        lambda cl: cl.load_prepared(prepared(labels=Labels(tags=("valves", NUL)))),
        "documents[0].labels.tags[1]",
    ),
    ("bulk document name", lambda cl: cl.load_prepared(prepared(name=NUL)), "documents[0].name"),
    # Naming a document: every entry point that takes an id (or the start of one).
    ("document", lambda cl: cl.document(NUL), "document id"),
    ("delete", lambda cl: cl.delete(NUL), "document id"),
    ("relabel id", lambda cl: cl.relabel(NUL, IngestOptions(category="Other")), "document id"),
    ("relabel tags", lambda cl: cl.relabel(document_id(cl), IngestOptions(tags=(NUL,))), "tags[0]"),
    ("reingest", lambda cl: cl.reingest(NUL), "document id"),
    ("refresh", lambda cl: cl.refresh(NUL), "document id"),
    ("index", lambda cl: cl.index(NUL), "document id"),
    ("cancel", lambda cl: cl.cancel(NUL), "document id"),
    ("versions", lambda cl: cl.versions(NUL), "document id"),
    ("replace", lambda cl: cl.submit_url("https://example.com/b", document_id=NUL), "document id"),
    ("refresh named", lambda cl: cl.refresh_candidates(document_ids=[NUL]), "document id"),
    # Listing documents.
    ("list by name", lambda cl: cl.list_documents(DocumentQuery(name_contains=NUL)), "name_contains"),
    ("list by scope", lambda cl: cl.list_documents(DocumentQuery(scopes=(NUL,))), "scopes[0]"),
    ("list by category", lambda cl: cl.list_documents(DocumentQuery(category=NUL)), "category"),
    ("list by tag", lambda cl: cl.list_documents(DocumentQuery(tag=NUL)), "tag"),
    ("list by key prefix", lambda cl: cl.list_documents(DocumentQuery(source_prefix=NUL)), "source_prefix"),
    ("list by type", lambda cl: cl.list_documents(DocumentQuery(content_type=NUL)), "content_type"),
    ("list by status", lambda cl: cl.list_documents(DocumentQuery(status=NUL)), "status"),
    # Keys, and the grant a shell builds from one.
    ("key name", lambda cl: cl.create_key(Role.READER, ["plant"], name=NUL), "name"),
    ("key scopes", lambda cl: cl.create_key(Role.READER, ["plant", NUL]), "scopes[1]"),
    ("revoke key", lambda cl: cl.revoke_key(NUL), "key id"),
    ("grant scopes", lambda cl: cl.search("relief valve", access=Access.reader([NUL])), "access.scopes"),
    ("grant user", lambda cl: cl.chat(access=Access.admin(NUL)), "access.user_id"),
]


@pytest.mark.parametrize(("call", "field"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_a_nul_character_is_refused_naming_the_field_and_nothing_stored_changes(
    library: Citeline, call: Callable[[Citeline], object], field: str
) -> None:
    before = stored(library)
    with pytest.raises(InvalidRequestError, match=f"^{re.escape(field)}: {re.escape(NUL_MESSAGE)}$"):
        call(library)
    assert stored(library) == before


def test_the_same_requests_without_the_nul_are_taken(library: Citeline) -> None:
    # The cases above are refused for the NUL, not for anything else they ask.
    filters = Filters(
        scopes=("plant",), category="Engineering", tags_any=("valves",), metadata={"site": "north"}
    )
    assert library.search(SearchRequest("relief valve", filters))
    assert library.list_documents(DocumentQuery(name_contains="valves", tag="valves")).total == 1
    assert library.document(document_id(library)[:8]).name == "valves.md"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: IngestOptions(tags=("valves", "x\ud800")), "tags[1]: must not contain a lone surrogate"),
        (
            lambda: IngestOptions(metadata={"site": "\udcff"}),
            "metadata['site']: must not contain a lone surrogate",
        ),
        (lambda: Filters(scopes=("\udc80",)), "filters.scopes[0]: must not contain a lone surrogate"),
        (lambda: IngestOptions(scopes=("s" * 257,)), "scopes: a scope must be at most 256 characters"),
        (lambda: IngestOptions(tags=("t" * 9000,)), "tags: a tag must be at most 256 characters"),
    ],
    ids=["surrogate tag", "surrogate metadata", "surrogate filter", "long scope", "long tag"],
)
def test_labels_the_database_cannot_store_or_index_are_refused_by_name(
    make: Callable[[], object], message: str
) -> None:
    # A lone surrogate cannot be encoded for the database (UnicodeEncodeError), and a label of 8 KB
    # overflowed the labels' index entry (ProgramLimitExceeded), failing the whole request.
    with pytest.raises(InvalidRequestError) as refused:
        make()
    assert message in str(refused.value)


def test_a_file_name_that_is_not_utf8_is_cleaned_not_refused(library: Citeline, tmp_path: Path) -> None:
    # A surrogate-escaped byte of a file name is the file system's, not a caller's mistake.
    name = tmp_path / "caf\udce9 notes.txt"
    try:
        name.write_text("The pump is primed for two minutes.")
    except (UnicodeEncodeError, OSError):
        pytest.skip("this file system refuses names that are not UTF-8")
    [result] = library.ingest([name])
    assert result.document is not None and result.document.name == "caf\ufffd notes.txt"
