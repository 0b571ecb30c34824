"""The catalog's operations: the life of a document version, from its row to its atomic swap-in.

A version is written in two transactions. The first, short one creates its row (status ``processing``,
inactive) so others can see the work. The second inserts every chunk, vector and posting and, in the
same commit, retires the previous version and activates the new one. Readers filter on
``documents.is_active``, so they see all of a version or none of it, and a crash mid-way leaves
nothing visible.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import unicodedata
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal, NamedTuple

import numpy as np
import psycopg
import sqlalchemy as sa
from numpy.typing import NDArray

from citeline.access import FULL_ACCESS, Access
from citeline.checks import refuse_nul
from citeline.errors import ConfigError, ConflictError, InvalidRequestError, NotFoundError
from citeline.metrics import CatalogCounts
from citeline.retrieve.filters import category_condition, check_scopes, content_types, like_escape
from citeline.store.index import VectorIndex, VersionVectors, as_array, fill_vectors
from citeline.store.models import Status
from citeline.types import SourceMetadata, embedding_text

#: The source of a document uploaded under a key its client chose (``Citeline.submit(source=...)``):
#: ``upload-key:runbooks/failover.md``. A scheme of its own, so a key can never be taken for another
#: document's source: a file (``file:``), a web page (``http:``, ``https:``) or a plain upload
#: (``upload:<uuid>``). Like a plain upload it has no origin to read again.
UPLOAD_KEY_SCHEME = "upload-key:"


def source_key(key: str) -> str:
    """An upload's key (``source``) in Unicode's composed form (NFC), as it is registered and looked up.

    macOS writes file names decomposed ("Café" as "Cafe" and a combining accent), Linux and Windows
    composed: a folder synced from both under its paths would otherwise hold each such file twice.
    """
    return unicodedata.normalize("NFC", key)


def upload_key(source_uri: str) -> str | None:
    """The key a document was uploaded under (see :data:`UPLOAD_KEY_SCHEME`), or None."""
    return source_uri.removeprefix(UPLOAD_KEY_SCHEME) if source_uri.startswith(UPLOAD_KEY_SCHEME) else None


def is_upload(source_uri: str) -> bool:
    """Whether a document's source is an upload, with or without a key: nothing to read again."""
    return source_uri.startswith(("upload:", UPLOAD_KEY_SCHEME))


_DOC_COLUMNS = (
    "document_id AS id, id AS version_id, name, title, source_uri, content_type, file_path, content_hash, "
    "version, is_active, status, error, duration_ms, processed_at, page_count, vector_count, "
    "embedding_model, chunk_size, chunk_overlap, category, tags, scopes, metadata, uploaded_by, created_at, "
    "updated_at, source_metadata, attempts, queued_at, started_at, last_fetched_at, vector_index, added_at"
)


@dataclass(frozen=True)
class SameContent:
    """A document holding the same bytes as another one, under another name.

    ``scopes`` are its own (empty: universal): a copy given other scopes, or none, is seen by other
    readers than the document stored, which the one uploading it is to be told.
    """

    document_id: uuid.UUID
    name: str
    scopes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """As an upload's answer and ``citeline ingest --json`` give it."""
        return {"document_id": str(self.document_id), "name": self.name, "scopes": list(self.scopes)}


#: The versions whose bytes a document holds or will hold: its active one, and those registered and not
#: yet built (a file's hash is known at upload). Not failed ones, nor those asked to stop (cancelled).
#: Written as the partial index ``documents_held_content`` is (migration 0021), so that it serves the
#: question.
_HOLDING = "(is_active OR status IN ('pending', 'queued', 'processing')) AND NOT cancel_requested"


def same_content(
    conn: sa.Connection, content_hash: str | None, document_id: uuid.UUID
) -> tuple[SameContent, ...]:
    """The documents other than ``document_id`` whose content hashes to ``content_hash``, by name (none
    for a source without a hash: a web page not yet fetched).

    A document counts by its active version or by one still pending, queued or being built: two copies
    uploaded one right after the other are named to each other before the first is built. Each is
    named (and scoped) as its active version is, else as its newest version holding the bytes.
    """
    if content_hash is None:
        return ()
    rows = conn.execute(
        sa.text(
            "SELECT document_id, name, scopes FROM ("
            "SELECT DISTINCT ON (document_id) document_id, name, scopes FROM documents "
            f"WHERE content_hash = :h AND {_HOLDING} AND document_id <> :d "
            "ORDER BY document_id, is_active DESC, version DESC"
            ") same ORDER BY name, document_id"
        ),
        {"h": content_hash, "d": document_id},
    ).all()
    return tuple(SameContent(row.document_id, row.name, tuple(row.scopes)) for row in rows)


@dataclass(frozen=True)
class DocumentInfo:
    """One document version as the catalog holds it.

    ``id`` is the document's: every version of one source shares it, and users, the CLI and the API
    name documents by it. ``version_id`` is this version's own, which its chunks refer to.
    """

    id: uuid.UUID
    version_id: uuid.UUID
    name: str
    title: str | None
    source_uri: str
    content_type: str | None
    file_path: str | None
    content_hash: str | None
    version: int
    is_active: bool
    status: str
    error: str | None
    duration_ms: float | None
    processed_at: datetime | None
    page_count: int | None
    vector_count: int
    embedding_model: str | None
    chunk_size: int | None
    chunk_overlap: int | None
    category: str | None
    tags: list[str]
    scopes: list[str]
    metadata: dict[str, Any]
    uploaded_by: str | None
    #: When the document was first added, the same on every version; ``created_at`` is when this
    #: version was made.
    added_at: datetime
    created_at: datetime
    updated_at: datetime
    #: What the loader found about the source (``author``, ``pages``, ``url``, ...), as strings.
    source_metadata: SourceMetadata
    #: Runs that claimed this version as a job; when it was queued and when its latest run started.
    attempts: int = 0
    queued_at: datetime | None = None
    started_at: datetime | None = None
    #: When the source was last read at its origin (a web page fetched, a file read at its path).
    last_fetched_at: datetime | None = None
    #: The vector index holding this version's vectors (see store/index.py).
    vector_index: str = "pgvector"

    @property
    def reingestable(self) -> bool:
        """Whether a new version can be built from what this one keeps: a stored original, or a web
        page's URL. An upload whose file failed its build (empty, not what its name says) keeps no
        original, so re-ingesting it needs the file again; one failed by a store or model out of reach
        keeps it."""
        return bool(self.file_path) or self.source_uri.startswith(("http://", "https://"))

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["reingestable"] = self.reingestable
        out["source"] = upload_key(self.source_uri)
        out["id"] = str(self.id)
        out["version_id"] = str(self.version_id)
        for key in (
            "processed_at",
            "added_at",
            "created_at",
            "updated_at",
            "queued_at",
            "started_at",
            "last_fetched_at",
        ):
            out[key] = out[key].isoformat() if out[key] else None
        return out


class VersionStart(StrEnum):
    """What :func:`begin_version` did."""

    CREATED = "created"
    UNCHANGED = "unchanged"
    RELABELLED = "relabelled"


@dataclass(frozen=True)
class VersionSpec:
    """What identifies a version's content: if all of these match the active version, nothing changes.

    ``content_hash`` is None for a web page not fetched yet: its version is compared once the job
    building it has fetched the page (:func:`record_fetch`).
    """

    content_hash: str | None
    embedding_model: str
    chunk_size: int
    chunk_overlap: int
    #: The vector index that will hold the vectors: a source moves to another backend when built again.
    vector_index: str = "pgvector"

    def same_as(self, version: DocumentInfo) -> bool:
        """Whether ``version`` has this content, model and chunking (an unknown content never has)."""
        return (
            self.content_hash is not None
            and version.content_hash == self.content_hash
            and version.embedding_model == self.embedding_model
            and version.chunk_size == self.chunk_size
            and version.chunk_overlap == self.chunk_overlap
            and version.vector_index == self.vector_index
        )


@dataclass(frozen=True)
class Labels:
    """The descriptive fields of a document, which can change without re-embedding it.

    ``None`` means "keep what the source's current version has" (nothing, for a new source), so
    re-ingesting a folder without naming its scopes can never turn scoped documents universal. An
    empty value removes the label: ``category=""`` is stored as no category (NULL).
    """

    scopes: tuple[str, ...] | None = None
    category: str | None = None
    tags: tuple[str, ...] | None = None
    metadata: dict[str, Any] | None = None
    uploaded_by: str | None = None

    def over(self, current: DocumentInfo | None) -> Labels:
        """These labels, with unset fields taken from ``current``."""
        return Labels(
            scopes=self.scopes if self.scopes is not None else tuple(current.scopes if current else ()),
            category=self.category if self.category is not None else (current.category if current else None),
            tags=self.tags if self.tags is not None else tuple(current.tags if current else ()),
            metadata=self.metadata
            if self.metadata is not None
            else dict(current.metadata if current else {}),
            uploaded_by=self.uploaded_by
            if self.uploaded_by is not None
            else (current.uploaded_by if current else None),
        )


@dataclass(frozen=True)
class ChunkRow:
    """A chunk ready to store: its draft fields, vector and keyword terms."""

    chunk_index: int
    text: str
    page: int
    start: int
    end: int
    section: str | None
    terms: dict[str, int]
    token_count: int
    #: Auto-metadata (citeline.annotate): canonical model-number keys and the section's type.
    model_numbers: tuple[str, ...] = ()
    section_type: str | None = None
    #: Embedded and indexed with the text, not part of it (types.ChunkDraft.context).
    context: str | None = None
    #: The first and last row of the source file the chunk holds (types.ChunkDraft.rows).
    rows: tuple[int, int] | None = None

    @property
    def embedded(self) -> str:
        """The text its vector is made from."""
        return embedding_text(self.text, self.context)

    @property
    def text_hash(self) -> str:
        """The hash vectors are reused by: of what is embedded, so a row of a table and the same row
        under its header are two vectors."""
        return hashlib.sha256(self.embedded.encode()).hexdigest()


def _source_key(source_uri: str) -> int:
    return int.from_bytes(hashlib.blake2b(source_uri.encode(), digest_size=8).digest(), "big", signed=True)


def _lock_source(conn: sa.Connection, source_uri: str) -> None:
    """Serialise version changes of one source across processes, for the transaction's life."""
    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _source_key(source_uri)})


def _lock_sources(conn: sa.Connection, source_uris: Sequence[str]) -> None:
    """:func:`_lock_source` for many sources in one round trip, in key order so that two
    transactions locking overlapping sets can never each hold a lock the other waits for."""
    keys = sorted({_source_key(u) for u in source_uris})
    conn.execute(
        sa.text("SELECT pg_advisory_xact_lock(k) FROM unnest(CAST(:keys AS bigint[])) AS k"),
        {"keys": keys},
    )


def _row_to_info(row: sa.Row[Any]) -> DocumentInfo:
    return DocumentInfo(**row._asdict())


def source_document(conn: sa.Connection, source_uri: str) -> DocumentInfo | None:
    """The current version (the active one, else the newest) of the document holding ``source_uri``."""
    row = conn.execute(
        sa.text(
            f"SELECT {_DOC_COLUMNS} FROM documents WHERE source_uri = :s "
            "ORDER BY is_active DESC, version DESC LIMIT 1"
        ),
        {"s": source_uri},
    ).first()
    return _row_to_info(row) if row else None


def active_version(conn: sa.Connection, source_uri: str) -> DocumentInfo | None:
    """The visible version of a source, if any."""
    row = conn.execute(
        sa.text(f"SELECT {_DOC_COLUMNS} FROM documents WHERE source_uri = :s AND is_active"),
        {"s": source_uri},
    ).first()
    return _row_to_info(row) if row else None


def served_model(conn: sa.Connection) -> str | None:
    """The embedding model the namespace serves: its active versions' and its queries' (None before
    anything was indexed)."""
    model: str | None = conn.execute(
        sa.text("SELECT embedding_model FROM corpus_stats WHERE id = 1")
    ).scalar_one()
    return model


def migration_target(conn: sa.Connection) -> str | None:
    """The model a running model migration moves the namespace to, if one runs."""
    target: str | None = conn.execute(
        sa.text("SELECT target_model FROM model_migrations WHERE status = 'running'")
    ).scalar()
    return target


def ingest_model(conn: sa.Connection, configured: str) -> str:
    """The model new versions are embedded by: the served one while the namespace holds documents or
    a migration runs (a different ``configured`` model arrives through a migration, never mixed in),
    else ``configured``."""
    served = served_model(conn)
    if served is None or served == configured:
        return configured
    busy = conn.execute(
        sa.text(
            "SELECT EXISTS (SELECT 1 FROM documents WHERE is_active) "
            "OR EXISTS (SELECT 1 FROM model_migrations WHERE status = 'running')"
        )
    ).scalar_one()
    return served if busy else configured


@dataclass(frozen=True)
class VersionRequest:
    """A source that may need a new version.

    ``status`` is where a new version starts: ``processing`` when the caller builds it now (in the
    run it names), ``queued`` for a runner to claim, ``pending`` to wait until asked. ``document_id``
    names the document for a source the catalog has never seen (its versions otherwise share the id
    of the source's earlier ones, or a new one).
    """

    source_uri: str
    name: str
    spec: VersionSpec
    labels: Labels
    file_path: str | None = None
    status: Status = Status.PROCESSING
    document_id: uuid.UUID | None = None
    #: Build a new version even when the content, model and chunking are those of the active one.
    force: bool = False
    #: When the source was read at its origin for this request (None: not read, e.g. a re-ingest
    #: from the stored original, which keeps the active version's time).
    fetched_at: datetime | None = None
    #: What the source holds as far as its name tells (an upload's extension), until its build reads it.
    content_type: str | None = None


def begin_version(
    conn: sa.Connection,
    *,
    source_uri: str,
    name: str,
    spec: VersionSpec,
    labels: Labels,
    file_path: str | None = None,
    run: int | None = None,
) -> tuple[DocumentInfo, VersionStart]:
    """:func:`begin_versions` for one source."""
    [out] = begin_versions(conn, [VersionRequest(source_uri, name, spec, labels, file_path)], run=run)
    return out


def begin_versions(
    conn: sa.Connection, requests: Sequence[VersionRequest], *, run: int | None = None
) -> list[tuple[DocumentInfo, VersionStart]]:
    """Start a new version of each source, or recognise that its content is unchanged.

    When a source's active version already has this content hash, model and chunking, no version is
    created: its labels are updated in place if they differ (``RELABELLED``), else nothing changes
    (``UNCHANGED``). New versions are inserted in one statement. Each source may appear once.
    ``run`` is the key of the ingest run (:func:`hold_run`) that will finish the new versions; a
    version with none is taken as abandoned by the next :func:`fail_abandoned`.
    """
    uris = [r.source_uri for r in requests]
    if len(set(uris)) != len(uris):
        raise ValueError("begin_versions: a source may appear only once per call")
    _lock_sources(conn, uris)
    # Each source's current version: the active one, else its newest (failed, queued, pending). A new
    # version takes the labels it is not given from it: from the active one alone, a document whose
    # only version failed or is still to be built was replaced or re-ingested with no scopes at all,
    # universal, readable by every reader key.
    current = {
        info.source_uri: info
        for info in (
            _row_to_info(r)
            for r in conn.execute(
                sa.text(
                    f"SELECT DISTINCT ON (source_uri) {_DOC_COLUMNS} FROM documents "
                    "WHERE source_uri = ANY(:s) ORDER BY source_uri, is_active DESC, version DESC"
                ),
                {"s": uris},
            )
        )
    }
    out: dict[str, tuple[DocumentInfo, VersionStart]] = {}
    create: list[tuple[VersionRequest, Labels]] = []
    #: Unchanged sources read again: their active version's fetch time moves forward.
    touched: list[tuple[uuid.UUID, datetime]] = []
    for req in requests:
        latest = current.get(req.source_uri)
        active = latest if latest is not None and latest.is_active else None
        labels = req.labels.over(latest)
        spec = req.spec
        if active is not None and not req.force and spec.same_as(active):
            if req.fetched_at is not None:
                touched.append((active.version_id, req.fetched_at))
                active = replace(active, last_fetched_at=req.fetched_at)
            if _labels_differ(active, labels):
                _set_labels(conn, active.version_id, labels)
                out[req.source_uri] = (get_version(conn, active.version_id), VersionStart.RELABELLED)
            else:
                out[req.source_uri] = (active, VersionStart.UNCHANGED)
        else:
            create.append((req, labels))
    if touched:
        conn.execute(
            sa.text(
                "UPDATE documents d SET last_fetched_at = v.t FROM unnest(CAST(:ids AS uuid[]), "
                "CAST(:ts AS timestamptz[])) AS v(id, t) WHERE d.id = v.id"
            ),
            {"ids": [i for i, _ in touched], "ts": [t for _, t in touched]},
        )
    if create:
        for info in _insert_versions(conn, create, run):
            out[info.source_uri] = (info, VersionStart.CREATED)
        twins = _twins(conn, create)
        if twins:
            _insert_versions(conn, twins, None)
    return [out[u] for u in uris]


def _touch_fetched(conn: sa.Connection, version_id: uuid.UUID, fetched_at: datetime) -> None:
    conn.execute(
        sa.text("UPDATE documents SET last_fetched_at = :t WHERE id = :id"),
        {"t": fetched_at, "id": version_id},
    )


def record_fetch(
    conn: sa.Connection, version: DocumentInfo, spec: VersionSpec, fetched_at: datetime, *, compare: bool
) -> tuple[DocumentInfo, VersionStart] | None:
    """Record what a job building ``version`` of a web page found when it fetched the page.

    With ``compare`` (a version registered before its page was fetched: added or refreshed, not
    re-ingested), a page whose text, model and chunking are the active version's makes ``version``
    unnecessary: it is deleted (nothing of it was stored yet), the active version's fetch time moves
    forward and takes ``version``'s labels if they differ; that version is returned, ``UNCHANGED`` or
    ``RELABELLED``. Otherwise ``version`` gets the page's text hash and fetch time, and None is returned:
    build it.
    """
    _lock_source(conn, version.source_uri)
    active = active_version(conn, version.source_uri)
    if compare and active is not None and spec.same_as(active):
        asked = get_version(conn, version.version_id)
        conn.execute(
            sa.text("DELETE FROM documents WHERE id = :id AND NOT is_active"), {"id": version.version_id}
        )
        _touch_fetched(conn, active.version_id, fetched_at)
        labels = Labels(tuple(asked.scopes), asked.category, tuple(asked.tags), asked.metadata)
        start = VersionStart.UNCHANGED
        if _labels_differ(active, labels):
            _set_labels(conn, active.version_id, labels)
            start = VersionStart.RELABELLED
        return get_version(conn, active.version_id), start
    conn.execute(
        sa.text("UPDATE documents SET content_hash = :h, last_fetched_at = :t WHERE id = :id"),
        {"h": spec.content_hash, "t": fetched_at, "id": version.version_id},
    )
    return None


def _twins(
    conn: sa.Connection, created: Sequence[tuple[VersionRequest, Labels]]
) -> list[tuple[VersionRequest, Labels]]:
    """While a model migration runs, each new version of the served model gets a twin embedded by the
    target, queued (or pending, with it) for a runner, so both spaces stay complete until the switch."""
    target = migration_target(conn)
    if target is None:
        return []
    served = served_model(conn)
    return [
        (
            replace(
                req,
                spec=replace(req.spec, embedding_model=target),
                status=Status.PENDING if req.status is Status.PENDING else Status.QUEUED,
            ),
            labels,
        )
        for req, labels in created
        if req.spec.embedding_model == served
    ]


def _insert_versions(
    conn: sa.Connection, create: Sequence[tuple[VersionRequest, Labels]], run: int | None
) -> list[DocumentInfo]:
    """Insert new versions in one statement (each source at most once)."""
    # file_path is recorded now, not at the swap, so nobody removes the original while the
    # version is built.
    rows = [
        {
            "id": str(uuid.uuid4()),
            "doc": str(req.document_id) if req.document_id else None,
            "st": req.status.value,
            "name": req.name,
            "s": req.source_uri,
            "fp": req.file_path,
            "h": req.spec.content_hash,
            "m": req.spec.embedding_model,
            "cs": req.spec.chunk_size,
            "co": req.spec.chunk_overlap,
            # The backend the build will write to, shown while it is queued (the build records it again).
            "vi": req.spec.vector_index,
            "fetched": req.fetched_at.isoformat() if req.fetched_at else None,
            "ct": req.content_type,
            **_label_params(labels, as_json=True),
        }
        for req, labels in create
    ]
    created = conn.execute(
        sa.text(
            "INSERT INTO documents (id, document_id, name, source_uri, file_path, content_hash, version, "
            "status, embedding_model, chunk_size, chunk_overlap, category, tags, scopes, metadata, "
            "uploaded_by, ingest_run, queued_at, last_fetched_at, content_type, vector_index, added_at) "
            "SELECT v.id, k.doc, v.name, v.s, v.fp, v.h, "
            "(SELECT coalesce(max(version), 0) + 1 FROM documents WHERE source_uri = v.s), "
            "v.st, v.m, v.cs, v.co, v.cat, v.tags, v.scopes, v.meta, v.by, "
            "CASE WHEN v.st = 'processing' THEN CAST(:run AS bigint) END, "
            "CASE WHEN v.st = 'queued' THEN now() END, "
            "coalesce(v.fetched, "
            "(SELECT last_fetched_at FROM documents WHERE source_uri = v.s AND is_active)), v.ct, v.vi, "
            # A new version keeps the time its document was first added.
            "coalesce((SELECT min(added_at) FROM documents WHERE document_id = k.doc), now()) "
            "FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS v(id uuid, doc uuid, st text, name text, "
            "s text, fp text, h text, m text, cs int, co int, vi text, fetched timestamptz, ct text, "
            "cat text, tags text[], scopes text[], meta jsonb, by text) "
            "CROSS JOIN LATERAL (SELECT coalesce(v.doc, (SELECT document_id FROM documents "
            "WHERE source_uri = v.s LIMIT 1), gen_random_uuid()) AS doc) k "
            f"RETURNING {_DOC_COLUMNS}"
        ),
        {"rows": json.dumps(rows), "run": run},
    )
    return [_row_to_info(r) for r in created]


def _insert_version(
    conn: sa.Connection,
    source_uri: str,
    name: str,
    status: Status,
    labels: Labels,
    spec: VersionSpec | None,
    file_path: str | None = None,
) -> DocumentInfo:
    """A new, inactive version row numbered after every earlier one of the source."""
    row = conn.execute(
        sa.text(
            "INSERT INTO documents (id, document_id, name, source_uri, file_path, content_hash, version, "
            "status, embedding_model, chunk_size, chunk_overlap, category, tags, scopes, metadata, "
            "uploaded_by, added_at) "
            "VALUES (:id, coalesce((SELECT document_id FROM documents WHERE source_uri = :s LIMIT 1), "
            "gen_random_uuid()), :name, :s, :fp, :h, "
            "(SELECT coalesce(max(version), 0) + 1 FROM documents WHERE source_uri = :s), "
            ":st, :m, :cs, :co, :cat, :tags, :scopes, CAST(:meta AS jsonb), :by, "
            "coalesce((SELECT min(added_at) FROM documents WHERE source_uri = :s), now())) "
            f"RETURNING {_DOC_COLUMNS}"
        ),
        {
            "id": uuid.uuid4(),
            "name": name,
            "s": source_uri,
            "fp": file_path,
            "h": spec.content_hash if spec else None,
            "st": status.value,
            "m": spec.embedding_model if spec else None,
            "cs": spec.chunk_size if spec else None,
            "co": spec.chunk_overlap if spec else None,
            **_label_params(labels),
        },
    ).one()
    return _row_to_info(row)


def record_failure(
    conn: sa.Connection,
    *,
    source_uri: str,
    name: str,
    reason: str,
    labels: Labels,
    doc_id: uuid.UUID | None,
    keep_original: bool = False,
) -> DocumentInfo:
    """Mark a version failed with ``reason`` (creating its row if it never got one), dropping its chunks.

    It lets go of its stored original, unless ``keep_original``: a build that failed for a passing
    reason (a store or model out of reach) was no fault of the file, which a re-ingest builds again.
    Older failed attempts of the same source are removed so the catalog holds one failure per source
    (the caller removes the originals they held, read with :func:`version_files` beforehand); the
    active version, if any, is left untouched.
    """
    _lock_source(conn, source_uri)
    labels = labels.over(active_version(conn, source_uri))
    if doc_id is None:
        doc_id = _insert_version(conn, source_uri, name, Status.FAILED, labels, None).version_id
    conn.execute(sa.text("DELETE FROM chunks WHERE document_id = :id"), {"id": doc_id})
    conn.execute(
        sa.text(
            "UPDATE documents SET status = 'failed', error = :e, is_active = false, vector_count = 0, "
            "file_path = CASE WHEN :keep THEN file_path END, "
            "processed_at = now(), updated_at = now() WHERE id = :id"
        ),
        {"e": reason, "id": doc_id, "keep": keep_original},
    )
    conn.execute(
        sa.text("DELETE FROM documents WHERE source_uri = :s AND status = 'failed' AND id <> :id"),
        {"s": source_uri, "id": doc_id},
    )
    return get_version(conn, doc_id)


def check_movable(conn: sa.Connection, document: DocumentInfo, source_uri: str) -> None:
    """Refuse to move ``document`` to ``source_uri`` (see :func:`move_document`) when that source is
    another document's, or while a version of it is pending, queued or processing: such a version
    would be built from the old origin and swapped in over the replacement.

    Locks both sources and the document's rows for the transaction, so no job claims a version of it
    meanwhile.
    """
    _lock_sources(conn, [document.source_uri, source_uri])
    holder = conn.execute(
        sa.text("SELECT document_id FROM documents WHERE source_uri = :s AND document_id <> :d LIMIT 1"),
        {"s": source_uri, "d": document.id},
    ).scalar()
    if holder is not None:
        raise ConflictError(
            f"{source_uri} is already document {holder}: replace or delete that document instead of "
            f"giving its source to document {document.id}"
        )
    busy = conn.execute(
        sa.text(
            "SELECT version, status FROM documents WHERE document_id = :d "
            "AND status IN ('pending', 'queued', 'processing') ORDER BY version FOR UPDATE"
        ),
        {"d": document.id},
    ).first()
    if busy is not None:
        raise ConflictError(
            f"document {document.id} has version {busy.version} {busy.status}, from {document.source_uri}: "
            "wait for it or cancel it, then replace the document"
        )


def move_document(conn: sa.Connection, document_id: uuid.UUID, source_uri: str) -> None:
    """Give every version of a document the source ``source_uri``, after :func:`check_movable`.

    A source is what a document's versions share and what refresh reads again, so a document replaced
    by a version from elsewhere (an upload, another web page) must leave its old origin: else the next
    refresh would build the old file or page over the replacement. Versions not built yet were not read
    at the new source: they lose the fetch time they took from the active version.
    """
    conn.execute(
        sa.text(
            "UPDATE documents SET source_uri = :s, updated_at = now(), last_fetched_at = CASE WHEN "
            "status IN ('pending', 'queued') THEN NULL ELSE last_fetched_at END WHERE document_id = :d"
        ),
        {"s": source_uri, "d": document_id},
    )


#: Entries of ``keyword_log`` kept; older ones are deleted as new ones are written.
KEYWORD_LOG_KEEP = 100_000
#: Advisory-lock class of ingest runs. Runs use the two-key form, whose key space is apart from the
#: one-key source locks.
_RUN_LOCK_CLASS = 0x63697465
#: What an abandoned version's error says.
INTERRUPTED = (
    "interrupted: the ingest writing this version stopped before it finished; ingest the source again"
)
#: Whether a version's run still holds its lock, for a query over ``documents d``.
_RUN_ALIVE = (
    "EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted "
    "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND l.classid = CAST(:run_class AS oid) AND l.objsubid = 2 AND l.objid::text::bigint = d.ingest_run)"
)


def hold_run(conn: sa.Connection) -> int:
    """Start an ingest run on ``conn`` and return its key, for :func:`begin_versions`.

    The run holds a session-level advisory lock until :func:`release_run`, or until its connection
    ends with the process that owns it: that is how :func:`fail_abandoned` tells a run that is still
    working from one that is gone. It is a session lock: it outlives the transaction it is taken in.
    """
    key = secrets.randbelow(2**31 - 1) + 1
    conn.execute(sa.text("SELECT pg_advisory_lock(:c, :k)"), {"c": _RUN_LOCK_CLASS, "k": key})
    return key


def release_run(conn: sa.Connection, key: int) -> None:
    """End the run :func:`hold_run` started; versions it left processing become abandoned."""
    conn.execute(sa.text("SELECT pg_advisory_unlock(:c, :k)"), {"c": _RUN_LOCK_CLASS, "k": key})


def fail_abandoned(
    conn: sa.Connection, *, retries: int = 0, retry_delay: float = 0.0
) -> list[tuple[DocumentInfo, str | None]]:
    """Settle every version left ``processing`` by a run that no longer holds its lock.

    A job (a version that was queued) whose attempts do not exceed ``retries`` goes back to the queue
    (after ``retry_delay`` seconds): its original is stored, so another run can build it. Any other
    abandoned version is marked failed. Returns each failed version with the original file it had
    recorded (for the caller to remove if nothing else uses it). A version is checked again under its
    source's lock, so one that its run activates meanwhile is left alone.
    """
    found = conn.execute(
        sa.text(f"SELECT id, source_uri FROM documents d WHERE status = 'processing' AND NOT {_RUN_ALIVE}"),
        {"run_class": _RUN_LOCK_CLASS},
    ).all()
    failed: list[tuple[DocumentInfo, str | None]] = []
    for doc_id, source_uri in found:
        _lock_source(conn, source_uri)
        row = conn.execute(
            sa.text(
                f"SELECT name, file_path, queued_at IS NOT NULL, attempts FROM documents d "
                f"WHERE id = :id AND status = 'processing' AND NOT {_RUN_ALIVE}"
            ),
            {"id": doc_id, "run_class": _RUN_LOCK_CLASS},
        ).first()
        if row is None:
            continue
        name, file_path, is_job, attempts = row
        if is_job and attempts <= retries:
            requeue(conn, doc_id, f"{INTERRUPTED_JOB} (attempt {attempts})", delay=retry_delay)
            continue
        reason = INTERRUPTED if not is_job else f"{INTERRUPTED_JOB} {attempts} times; giving up"
        info = record_failure(
            conn, source_uri=source_uri, name=name, reason=reason, labels=Labels(), doc_id=doc_id
        )
        failed.append((info, file_path))
    return failed


#: What a job's error says when the run processing it stopped (a crash, a killed worker).
INTERRUPTED_JOB = "interrupted: the run processing this document stopped before it finished"
#: What a cancelled job's error says.
CANCELLED = "cancelled"


def claim_jobs(
    conn: sa.Connection, *, run: int, limit: int, version_ids: Sequence[uuid.UUID] | None = None
) -> list[DocumentInfo]:
    """Claim up to ``limit`` queued versions for the run ``run`` (see :func:`hold_run`): ``processing``.

    Oldest first, and only those whose retry delay has passed; ``version_ids`` restricts the claim to
    those versions. Rows other runs are claiming are skipped (``SKIP LOCKED``): any number of runners
    share one queue, and a version is claimed by one of them.
    """
    only = "AND id = ANY(CAST(:ids AS uuid[]))" if version_ids is not None else ""
    rows = conn.execute(
        sa.text(
            "UPDATE documents d SET status = 'processing', ingest_run = :run, attempts = attempts + 1, "
            "started_at = now(), updated_at = now(), not_before = NULL "
            "WHERE d.id IN (SELECT id FROM documents WHERE status = 'queued' "
            f"AND (not_before IS NULL OR not_before <= now()) {only} "
            "ORDER BY queued_at, id LIMIT :n FOR UPDATE SKIP LOCKED) "
            f"RETURNING {_DOC_COLUMNS.replace('document_id AS id', 'd.document_id AS id')}"
        ),
        {"run": run, "n": limit, "ids": list(version_ids or [])},
    ).all()
    return sorted((_row_to_info(r) for r in rows), key=lambda d: (d.queued_at or d.created_at, d.name))


def mark_started(conn: sa.Connection, version_id: uuid.UUID) -> None:
    """Restart the clock of a claimed version as its own build begins: a run claims several at once and
    builds them in turn, and the hard time limit (:func:`fail_overdue`) counts from ``started_at``."""
    conn.execute(
        sa.text("UPDATE documents SET started_at = now() WHERE id = :id AND status = 'processing'"),
        {"id": version_id},
    )


#: Advisory-lock class of queue sweeps (two-key form; the second key is the namespace's schema).
_SWEEP_LOCK_CLASS = 0x63697466


def try_sweep(conn: sa.Connection) -> bool:
    """Whether this transaction may sweep the namespace's queue: one sweeper at a time, others skip."""
    return bool(
        conn.execute(
            sa.text("SELECT pg_try_advisory_xact_lock(:c, hashtext(current_schema()))"),
            {"c": _SWEEP_LOCK_CLASS},
        ).scalar_one()
    )


def ready_jobs(conn: sa.Connection, *, idle_for: float) -> list[uuid.UUID]:
    """Queued versions, oldest first, that could have been claimed for ``idle_for`` seconds and were not.

    For runners fed by a message broker: a version requeued by a sweep, or queued while the broker
    was unreachable, has no message to run it yet.
    """
    return list(
        conn.execute(
            sa.text(
                "SELECT id FROM documents WHERE status = 'queued' "
                "AND coalesce(not_before, updated_at) < now() - make_interval(secs => :idle) "
                "ORDER BY queued_at, id"
            ),
            {"idle": idle_for},
        ).scalars()
    )


def discard_chunks(conn: sa.Connection, version_id: uuid.UUID) -> None:
    """Delete the chunks of a version that was never swapped in (failed while it was built)."""
    conn.execute(
        sa.text(
            "DELETE FROM chunks WHERE document_id = :id AND NOT EXISTS "
            "(SELECT 1 FROM documents WHERE id = :id AND is_active)"
        ),
        {"id": version_id},
    )


def requeue(conn: sa.Connection, version_id: uuid.UUID, reason: str, *, delay: float) -> None:
    """Put a version back in the queue after a transient failure, to be retried after ``delay`` s."""
    conn.execute(sa.text("DELETE FROM chunks WHERE document_id = :id"), {"id": version_id})
    conn.execute(
        sa.text(
            "UPDATE documents SET status = 'queued', ingest_run = NULL, error = :e, "
            "not_before = now() + make_interval(secs => :delay), updated_at = now() "
            "WHERE id = :id AND status = 'processing'"
        ),
        {"id": version_id, "e": reason, "delay": delay},
    )


def enqueue(conn: sa.Connection, version_ids: Sequence[uuid.UUID]) -> list[DocumentInfo]:
    """Queue pending versions (registered, not yet asked to index); others are left as they are."""
    rows = conn.execute(
        sa.text(
            "UPDATE documents SET status = 'queued', queued_at = now(), updated_at = now() "
            f"WHERE id = ANY(CAST(:ids AS uuid[])) AND status = 'pending' RETURNING {_DOC_COLUMNS}"
        ),
        {"ids": list(version_ids)},
    ).all()
    return [_row_to_info(r) for r in rows]


def cancel(conn: sa.Connection, version: DocumentInfo) -> DocumentInfo:
    """Cancel a version's job: one not yet started fails at once; a running one is asked to stop.

    A version cancelled here keeps no original (nothing of it is left to build): the caller removes
    the file it had recorded after the commit, if nothing else uses it.

    Raises :class:`ConflictError` for a version that is not pending, queued or processing.
    """
    _lock_source(conn, version.source_uri)
    current = get_version(conn, version.version_id)
    if current.status in (Status.PENDING, Status.QUEUED):
        return record_failure(
            conn,
            source_uri=current.source_uri,
            name=current.name,
            reason=CANCELLED,
            labels=Labels(),
            doc_id=current.version_id,
        )
    if current.status == Status.PROCESSING:
        conn.execute(
            sa.text("UPDATE documents SET cancel_requested = true, updated_at = now() WHERE id = :id"),
            {"id": current.version_id},
        )
        return get_version(conn, current.version_id)
    raise ConflictError(
        f"document {current.id} version {current.version} is {current.status}: only a pending, queued "
        "or processing job can be cancelled"
    )


def fail_overdue(conn: sa.Connection, hard_limit: float) -> list[tuple[DocumentInfo, str | None]]:
    """Fail every version processing for longer than ``hard_limit`` seconds, whatever its run does.

    Its run may still be working; :func:`activate` will not swap a failed version in. Returns each
    failed version with the original file it had recorded, as :func:`fail_abandoned` does (a version
    failed here keeps none: for the caller to remove if nothing else uses it).
    """
    found = conn.execute(
        sa.text(
            "SELECT id, source_uri, name, file_path FROM documents WHERE status = 'processing' "
            "AND started_at < now() - make_interval(secs => :limit)"
        ),
        {"limit": hard_limit},
    ).all()
    reason = f"took longer than the hard time limit of {hard_limit:g} s (CITELINE_JOB_HARD_TIME_LIMIT)"
    return [
        (
            record_failure(
                conn, source_uri=uri, name=name, reason=reason, labels=Labels(), doc_id=version_id
            ),
            file_path,
        )
        for version_id, uri, name, file_path in found
    ]


def cancel_requested(conn: sa.Connection, version_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
    """Which of these versions were asked to stop."""
    return set(
        conn.execute(
            sa.text("SELECT id FROM documents WHERE id = ANY(CAST(:ids AS uuid[])) AND cancel_requested"),
            {"ids": list(version_ids)},
        ).scalars()
    )


def cached_vectors(
    conn: sa.Connection, model: str, text_hashes: Sequence[str], index: VectorIndex
) -> dict[str, NDArray[np.float32]]:
    """Vectors ``model`` already computed for any of these chunk texts: no text is embedded twice.

    A chunk row holds its vector unless another index (``index``) holds it by chunk id.
    """
    if not text_hashes:
        return {}
    rows = conn.execute(
        sa.text(
            "SELECT DISTINCT ON (text_hash) text_hash, id, embedding FROM chunks "
            "WHERE embedding_model = :m AND text_hash = ANY(:h) ORDER BY text_hash, embedding IS NULL"
        ),
        {"m": model, "h": list(set(text_hashes))},
    ).all()
    by_chunk = {int(cid): h for h, cid, _ in rows}
    found = fill_vectors(conn, index, {int(cid): None if v is None else as_array(v) for _, cid, v in rows})
    return {by_chunk[cid]: vec for cid, vec in found.items()}


def missing_version(exc: BaseException) -> bool:
    """Whether ``exc`` is a write of chunks whose version row is gone (deleted while it was built)."""
    cause = exc.orig if isinstance(exc, sa.exc.DBAPIError) and exc.orig is not None else exc
    return isinstance(cause, psycopg.errors.ForeignKeyViolation) and "chunks_document_id_fkey" in str(cause)


def refused_data(exc: BaseException) -> str | None:
    """Why PostgreSQL (or the driver, encoding for it) refused a write for a value it was given, in one
    line; None when ``exc`` is not such a refusal (the server down, a bug).

    A value out of a column's range or type (``DataError``: a NUL or lone surrogate in a text, a number
    too large, a text too long for its column) or over a server limit (an index key over 2,704 bytes).
    Such a write fails the same way however often it is tried; the writes of other documents in the
    same statement need not.
    """
    cause = exc.orig if isinstance(exc, sa.exc.DBAPIError) and exc.orig is not None else exc
    if isinstance(cause, psycopg.DataError | psycopg.errors.ProgramLimitExceeded | UnicodeEncodeError):
        return str(cause).strip().split("\n", 1)[0]
    return None


@dataclass(frozen=True)
class ChunkGroup:
    """Chunks of one (still invisible) version, with their vectors, to store in one go."""

    document: DocumentInfo
    rows: Sequence[ChunkRow]
    vectors: NDArray[np.float32]


#: The chunk columns written by :func:`insert_chunks`, in order, as PostgreSQL types (for binary COPY).
_CHUNK_COPY_TYPES = (
    "int8", "uuid", "int4", "int4", "text", "varchar",
    "int4", "int4", "int4", "text", "vector", "text", "int4", "text[]", "text", "text", "int4[]",
)  # fmt: skip


def insert_chunks(
    conn: sa.Connection, model: str, groups: Sequence[ChunkGroup], *, inline_vectors: bool = True
) -> list[VersionVectors]:
    """Append chunks with their postings, and their vectors when ``inline_vectors``, to (still invisible)
    versions; returns each group's chunk ids with its vectors, for a vector index that holds them itself.

    One id reservation and two COPYs however many versions the chunks belong to: per-version
    statements were most of the cost of ingesting many small documents.
    """
    total = sum(len(g.rows) for g in groups)
    if not total:
        return []
    raw = conn.connection.driver_connection
    assert raw is not None
    ids = [
        r[0]
        for r in conn.execute(
            sa.text("SELECT nextval(pg_get_serial_sequence('chunks', 'id')) FROM generate_series(1, :n)"),
            {"n": total},
        )
    ]
    with raw.cursor() as cur:
        # Binary COPY: vectors go as packed floats instead of being printed and parsed as decimal text.
        with cur.copy(
            "COPY chunks (id, document_id, version, chunk_index, text, text_hash, page, start_offset, "
            "end_offset, section, embedding, embedding_model, token_count, model_numbers, section_type, "
            "context, rows) FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.set_types(_CHUNK_COPY_TYPES)
            at = 0
            for g in groups:
                doc = g.document
                for row, vec in zip(g.rows, g.vectors, strict=True):
                    copy.write_row(
                        (
                            ids[at],
                            doc.version_id,
                            doc.version,
                            row.chunk_index,
                            row.text,
                            row.text_hash,
                            row.page,
                            row.start,
                            row.end,
                            row.section,
                            vec if inline_vectors else None,
                            model,
                            row.token_count,
                            list(row.model_numbers),
                            row.section_type,
                            row.context,
                            None if row.rows is None else list(row.rows),
                        )
                    )
                    at += 1
        postings = "COPY postings (chunk_id, term, tf, dl, document_id) FROM STDIN (FORMAT BINARY)"
        with cur.copy(postings) as copy:
            copy.set_types(("int8", "text", "int4", "int4", "uuid"))
            at = 0
            for g in groups:
                for row in g.rows:
                    cid, dl, doc_id = ids[at], row.token_count, g.document.version_id
                    for term, tf in row.terms.items():
                        copy.write_row((cid, term, tf, dl, doc_id))
                    at += 1
    out: list[VersionVectors] = []
    at = 0
    for g in groups:
        out.append(VersionVectors(g.document.version_id, ids[at : at + len(g.rows)], g.vectors))
        at += len(g.rows)
    return out


@dataclass(frozen=True)
class Activation:
    """A fully stored version to swap in, with what was learnt about it while loading."""

    document: DocumentInfo
    title: str
    content_type: str
    file_path: str | None
    page_count: int
    duration_ms: float
    source_metadata: SourceMetadata = field(default_factory=dict)
    #: The keyword terms of the whole version (see analyzer.DocumentTerms), for document-level BM25.
    terms: Mapping[str, int] = field(default_factory=dict)


def activate(
    conn: sa.Connection, activations: Sequence[Activation], *, vector_index: str = "pgvector"
) -> list[DocumentInfo]:
    """Swap versions in as their sources' visible versions, in the caller's transaction.

    ``vector_index`` names the index that holds their vectors (see store/index.py), which every search
    of them must then use.

    Retires every other version of each source and keeps the corpus totals in step: deletes it with
    its chunks, or keeps one a live conversation cites as ``superseded`` (:func:`_supersede`). A newer
    version still to be built is kept: it swaps in after this one.
    Set-based: a handful of statements for any number of versions. When one source has several
    versions here, the newest wins and the others are retired with the rest.

    Only versions of the served model are swapped in (the first version of an empty namespace sets
    it). A version embedded by the target of a running model migration is kept ``staged`` instead,
    and its source's newer target-model versions are never retired; a version of any other model
    fails, so a query never meets two vector spaces. Returns the versions swapped in, then the staged.
    """
    if not activations:
        return []
    newest: dict[tuple[str, str | None], Activation] = {}
    for a in activations:
        key = (a.document.source_uri, a.document.embedding_model)
        held = newest.get(key)
        if held is None or a.document.version > held.document.version:
            newest[key] = a
    _lock_log(conn)
    _lock_sources(conn, [uri for uri, _ in newest])
    # A version failed meanwhile (cancelled, over its hard time limit) is not swapped in.
    building = set(
        conn.execute(
            sa.text(
                "SELECT id FROM documents WHERE id = ANY(CAST(:ids AS uuid[])) AND status = 'processing' "
                "AND NOT cancel_requested"
            ),
            {"ids": [a.document.version_id for a in newest.values()]},
        ).scalars()
    )
    newest = {uri: a for uri, a in newest.items() if a.document.version_id in building}
    if not newest:
        return []
    served, target = _bind_model(conn, [a.document for a in newest.values()]), migration_target(conn)
    staged = [a for a in newest.values() if target is not None and a.document.embedding_model == target]
    for a in [a for a in newest.values() if a.document.embedding_model not in (served, target)]:
        doc = a.document
        record_failure(
            conn,
            source_uri=doc.source_uri,
            name=doc.name,
            reason=f"embedded by {doc.embedding_model}, but this namespace now serves {served}; "
            "ingest it again",
            labels=Labels(),
            doc_id=doc.version_id,
        )
    chosen = [a for a in newest.values() if a.document.embedding_model == served]
    out = _stage(conn, staged, vector_index)
    _store_terms(conn, [*staged, *chosen])
    if not chosen:
        return out
    ids = [a.document.version_id for a in chosen]
    totals = {
        r[0]: (int(r[1]), int(r[2]))
        for r in conn.execute(
            sa.text(
                "SELECT document_id, count(*), coalesce(sum(token_count), 0) FROM chunks "
                "WHERE document_id = ANY(:ids) GROUP BY document_id"
            ),
            {"ids": ids},
        )
    }
    sources = [a.document.source_uri for a in chosen]
    _retire_others(conn, sources, keep=ids + _newer_kept(conn, ids, target), supersede=True)
    _record_built(
        conn, chosen, {i: n for i, (n, _) in totals.items()}, active=True, vector_index=vector_index
    )
    _bump_totals(conn, sum(c for c, _ in totals.values()), sum(t for _, t in totals.values()))
    _bump_document_totals(conn, ids)
    _log(conn, ids, added=True)
    rows = conn.execute(sa.text(f"SELECT {_DOC_COLUMNS} FROM documents WHERE id = ANY(:ids)"), {"ids": ids})
    by_id = {r.version_id: _row_to_info(r) for r in rows}
    return [by_id[i] for i in ids] + out


def _bind_model(conn: sa.Connection, versions: Sequence[DocumentInfo]) -> str | None:
    """The served model, bound first to the model of the first of ``versions`` when the namespace
    serves none yet, or holds no active version and no migration runs (an emptied namespace may
    start again with another model)."""
    conn.execute(
        sa.text(
            "UPDATE corpus_stats SET embedding_model = :m WHERE id = 1 AND (embedding_model IS NULL OR ("
            "NOT EXISTS (SELECT 1 FROM documents WHERE is_active) "
            "AND NOT EXISTS (SELECT 1 FROM model_migrations WHERE status = 'running')))"
        ),
        {"m": versions[0].embedding_model},
    )
    return served_model(conn)


def _newer_kept(conn: sa.Connection, ids: Sequence[uuid.UUID], target: str | None) -> list[uuid.UUID]:
    """Versions newer than these versions of their sources that retiring the older versions must not
    take, in one statement: twins embedded by a model migration's ``target``, and versions still to be
    built (``pending``, ``queued`` or ``processing``), replacements submitted while these were built,
    which the client was told are queued and which each swap in when built."""
    return list(
        conn.execute(
            sa.text(
                "SELECT n.id FROM documents n JOIN documents a ON a.source_uri = n.source_uri "
                "WHERE a.id = ANY(CAST(:ids AS uuid[])) AND n.version > a.version "
                "AND (n.status IN ('pending', 'queued', 'processing') OR n.embedding_model = :m)"
            ),
            {"ids": list(ids), "m": target},
        ).scalars()
    )


def _stage(conn: sa.Connection, staged: Sequence[Activation], vector_index: str) -> list[DocumentInfo]:
    """Keep built versions of a migration's target model ``staged``: complete and invisible until the
    switch. An older staged version of the same source is superseded and deleted."""
    if not staged:
        return []
    ids = [a.document.version_id for a in staged]
    counts = {
        r[0]: int(r[1])
        for r in conn.execute(
            sa.text("SELECT document_id, count(*) FROM chunks WHERE document_id = ANY(:ids) GROUP BY 1"),
            {"ids": ids},
        )
    }
    conn.execute(
        sa.text(
            "DELETE FROM documents WHERE source_uri = ANY(:s) AND status = 'staged' "
            "AND id <> ALL(CAST(:ids AS uuid[]))"
        ),
        {"s": [a.document.source_uri for a in staged], "ids": ids},
    )
    _record_built(conn, staged, counts, active=False, vector_index=vector_index)
    rows = conn.execute(sa.text(f"SELECT {_DOC_COLUMNS} FROM documents WHERE id = ANY(:ids)"), {"ids": ids})
    return [_row_to_info(r) for r in rows]


def _record_built(
    conn: sa.Connection,
    built: Sequence[Activation],
    counts: dict[uuid.UUID, int],
    *,
    active: bool,
    vector_index: str,
) -> None:
    """Record what was learnt building these versions, held by ``vector_index``; ``active`` makes them
    visible (``completed``), else they are ``staged``."""
    ids = [a.document.version_id for a in built]
    now = datetime.now(UTC)
    conn.execute(
        sa.text(
            "UPDATE documents d SET is_active = :active, status = :status, error = NULL, title = v.title, "
            "content_type = v.ct, file_path = v.fp, page_count = v.pc, vector_count = v.n, "
            "duration_ms = v.ms, source_metadata = v.sm, vector_index = :vi, processed_at = :now, "
            "updated_at = :now "
            "FROM unnest(CAST(:ids AS uuid[]), CAST(:titles AS text[]), CAST(:cts AS text[]), "
            "CAST(:fps AS text[]), CAST(:pcs AS int[]), CAST(:ns AS int[]), CAST(:mss AS float8[]), "
            "CAST(:sms AS jsonb[])) "
            "AS v(id, title, ct, fp, pc, n, ms, sm) WHERE d.id = v.id"
        ),
        {
            "ids": ids,
            "titles": [a.title for a in built],
            "cts": [a.content_type for a in built],
            "fps": [a.file_path for a in built],
            "pcs": [a.page_count for a in built],
            "ns": [counts.get(i, 0) for i in ids],
            "mss": [a.duration_ms for a in built],
            "sms": [json.dumps(a.source_metadata) for a in built],
            "vi": vector_index,
            "now": now,
            "active": active,
            "status": (Status.COMPLETED if active else Status.STAGED).value,
        },
    )


def retire_and_activate(
    conn: sa.Connection,
    source_uris: Sequence[str],
    ids: Sequence[uuid.UUID],
    *,
    keep: Sequence[uuid.UUID],
    chunks: int,
    tokens: int,
) -> None:
    """Make built versions (``ids``, holding ``chunks`` chunks of ``tokens`` terms) their sources'
    visible ones, retiring every other version of those sources but ``keep``; for a model switch,
    whose versions were recorded when they were staged."""
    _lock_log(conn)
    _retire_others(conn, source_uris, keep=list(keep), supersede=True)
    conn.execute(
        sa.text(
            "UPDATE documents SET is_active = true, status = 'completed', updated_at = now() "
            "WHERE id = ANY(CAST(:ids AS uuid[]))"
        ),
        {"ids": list(ids)},
    )
    _bump_totals(conn, chunks, tokens)
    _bump_document_totals(conn, ids)
    _log(conn, ids, added=True)


def versions_by_id(conn: sa.Connection, version_ids: Sequence[uuid.UUID]) -> list[DocumentInfo]:
    """These versions, in the order given (ids of versions that do not exist are skipped)."""
    rows = conn.execute(
        sa.text(f"SELECT {_DOC_COLUMNS} FROM documents WHERE id = ANY(CAST(:ids AS uuid[]))"),
        {"ids": list(version_ids)},
    )
    by_id = {r.version_id: _row_to_info(r) for r in rows}
    return [by_id[i] for i in version_ids if i in by_id]


def _store_terms(conn: sa.Connection, built: Sequence[Activation]) -> None:
    """Store built versions' document-level terms and lengths (counted once they become visible)."""
    ids, terms, tfs = [], [], []
    for a in built:
        for term, tf in a.terms.items():
            ids.append(a.document.version_id)
            terms.append(term)
            tfs.append(tf)
    conn.execute(
        sa.text(
            "INSERT INTO document_terms (document_id, term, tf) "
            "SELECT * FROM unnest(CAST(:ids AS uuid[]), CAST(:terms AS text[]), CAST(:tfs AS int[]))"
        ),
        {"ids": ids, "terms": terms, "tfs": tfs},
    )
    conn.execute(
        sa.text(
            "UPDATE documents d SET keyword_length = v.n "
            "FROM unnest(CAST(:ids AS uuid[]), CAST(:ns AS int[])) AS v(id, n) WHERE d.id = v.id"
        ),
        {"ids": [a.document.version_id for a in built], "ns": [sum(a.terms.values()) for a in built]},
    )


def _bump_document_totals(conn: sa.Connection, ids: Sequence[uuid.UUID]) -> None:
    """Count versions just made visible in the document-level totals (BM25's N and avgdl)."""
    conn.execute(
        sa.text(
            "UPDATE corpus_stats SET document_count = document_count + t.n, "
            "document_token_total = document_token_total + t.total FROM (SELECT count(*) AS n, "
            "coalesce(sum(keyword_length), 0) AS total FROM documents "
            "WHERE id = ANY(CAST(:ids AS uuid[])) AND keyword_length IS NOT NULL) t WHERE id = 1"
        ),
        {"ids": list(ids)},
    )


def version_ids(conn: sa.Connection, source_uris: Sequence[str]) -> list[uuid.UUID]:
    """Every version of these sources (what a swap-in of new versions may retire)."""
    return list(
        conn.execute(
            sa.text("SELECT id FROM documents WHERE source_uri = ANY(:s)"), {"s": list(source_uris)}
        ).scalars()
    )


def delete_document(conn: sa.Connection, document_id: uuid.UUID) -> list[DocumentInfo]:
    """Delete a document: every version of its source, with all chunks, vectors and postings."""
    doc = get_document(conn, document_id)
    _lock_log(conn)
    _lock_source(conn, doc.source_uri)
    removed = [
        _row_to_info(r)
        for r in conn.execute(
            sa.text(f"SELECT {_DOC_COLUMNS} FROM documents WHERE source_uri = :s"), {"s": doc.source_uri}
        )
    ]
    _retire_others(conn, [doc.source_uri], keep=[])
    return removed


def _retire_others(
    conn: sa.Connection, source_uris: Sequence[str], keep: Sequence[uuid.UUID], *, supersede: bool = False
) -> None:
    """Delete every version of these sources but ``keep``, taking the visible ones out of the totals.

    With ``supersede`` (a newer version replaces them), a built version that a live conversation cites
    is kept as ``superseded`` instead (see :func:`_supersede`).
    """
    retired = conn.execute(
        sa.text(
            "SELECT d.id, count(c.id), coalesce(sum(c.token_count), 0), d.keyword_length FROM documents d "
            "LEFT JOIN chunks c ON c.document_id = d.id "
            "WHERE d.source_uri = ANY(:s) AND d.is_active AND d.id <> ALL(CAST(:keep AS uuid[])) "
            "GROUP BY d.id"
        ),
        {"s": list(source_uris), "keep": list(keep)},
    ).all()
    if retired:
        _bump_totals(conn, -sum(int(r[1]) for r in retired), -sum(int(r[2]) for r in retired))
        # A version swapped in by a citeline older than document terms has no length and was not counted.
        counted = [int(r[3]) for r in retired if r[3] is not None]
        conn.execute(
            sa.text(
                "UPDATE corpus_stats SET document_count = document_count - :c, "
                "document_token_total = document_token_total - :t WHERE id = 1"
            ),
            {"c": len(counted), "t": sum(counted)},
        )
        _log(conn, [r[0] for r in retired], added=False)
    kept = _supersede(conn, source_uris, keep) if supersede else []
    conn.execute(
        sa.text("DELETE FROM documents WHERE source_uri = ANY(:s) AND id <> ALL(CAST(:keep AS uuid[]))"),
        {"s": list(source_uris), "keep": [*keep, *kept]},
    )


#: A chunk that a live conversation cites (``c`` is the chunk; the GIN index on the messages' cited
#: chunk ids answers it).
_CITED = (
    "EXISTS (SELECT 1 FROM messages m JOIN conversations v ON v.id = m.conversation_id "
    "WHERE m.cited_chunk_ids @> ARRAY[c.id] AND v.expires_at > now())"
)


def _supersede(conn: sa.Connection, source_uris: Sequence[str], keep: Sequence[uuid.UUID]) -> list[uuid.UUID]:
    """Keep the built versions of these sources (but ``keep``) that a live conversation cites, as
    ``superseded``; returns their ids.

    A superseded version keeps what opening its citations needs and nothing more: the chunks of the
    pages its cited chunks are on (a page's text is rebuilt from them) and its stored original. Its
    vectors, keyword postings and document terms go, so it is never searched, and storage stays
    bounded by the citations of live conversations (:func:`prune_superseded` deletes it once none
    cites it).
    """
    pages = conn.execute(
        sa.text(
            "SELECT DISTINCT c.document_id, c.page FROM documents d JOIN chunks c ON c.document_id = d.id "
            "WHERE d.source_uri = ANY(:s) AND d.id <> ALL(CAST(:keep AS uuid[])) "
            f"AND d.status IN ('completed', 'superseded') AND {_CITED}"
        ),
        {"s": list(source_uris), "keep": list(keep)},
    ).all()
    ids = list({r[0] for r in pages})
    if not ids:
        return []
    params = {"ids": ids, "docs": [r[0] for r in pages], "pages": [r[1] for r in pages]}
    conn.execute(
        sa.text(
            "DELETE FROM chunks c WHERE c.document_id = ANY(CAST(:ids AS uuid[])) "
            "AND (c.document_id, c.page) NOT IN "
            "(SELECT * FROM unnest(CAST(:docs AS uuid[]), CAST(:pages AS int[])))"
        ),
        params,
    )
    conn.execute(
        sa.text(
            "DELETE FROM postings WHERE chunk_id IN "
            "(SELECT id FROM chunks WHERE document_id = ANY(CAST(:ids AS uuid[])))"
        ),
        params,
    )
    conn.execute(sa.text("DELETE FROM document_terms WHERE document_id = ANY(CAST(:ids AS uuid[]))"), params)
    conn.execute(
        sa.text(
            "UPDATE chunks SET embedding = NULL WHERE document_id = ANY(CAST(:ids AS uuid[])) "
            "AND embedding IS NOT NULL"
        ),
        params,
    )
    conn.execute(
        sa.text(
            "UPDATE documents SET is_active = false, status = :st, vector_count = 0, updated_at = now() "
            "WHERE id = ANY(CAST(:ids AS uuid[]))"
        ),
        {**params, "st": Status.SUPERSEDED.value},
    )
    return ids


def prune_superseded(conn: sa.Connection) -> list[DocumentInfo]:
    """Delete the superseded versions that no live conversation cites any more (their conversations
    expired or were deleted); returns them, so that their originals can be removed after the commit."""
    rows = conn.execute(
        sa.text(
            f"DELETE FROM documents d WHERE d.status = :st AND NOT EXISTS "
            f"(SELECT 1 FROM chunks c WHERE c.document_id = d.id AND {_CITED}) "
            f"RETURNING {_DOC_COLUMNS}"
        ),
        {"st": Status.SUPERSEDED.value},
    )
    return [_row_to_info(r) for r in rows]


#: Held from a keyword_log insert to its commit, so log order is commit order: a reader that has
#: seen entry n has seen every entry before it.
_LOG_LOCK = 0x0C17E106


def _lock_log(conn: sa.Connection) -> None:
    """Take the log lock. Transactions that write the log take it before any source lock, so two of
    them can never wait for each other's locks."""
    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOG_LOCK})


def _log(conn: sa.Connection, doc_ids: Sequence[uuid.UUID], *, added: bool) -> None:
    """Record visibility changes for in-process keyword indexes (see keyword.MemoryKeywordIndex).

    The caller holds the log lock (see :func:`_lock_log`).
    """
    conn.execute(
        sa.text(
            "INSERT INTO keyword_log (document_id, added) "
            "SELECT id, :a FROM unnest(CAST(:ids AS uuid[])) WITH ORDINALITY AS t(id, i) ORDER BY i"
        ),
        {"ids": list(doc_ids), "a": added},
    )
    # A reader whose position is older than the oldest entry kept reloads from the catalog instead.
    conn.execute(
        sa.text("DELETE FROM keyword_log WHERE seq <= (SELECT max(seq) FROM keyword_log) - :keep"),
        {"keep": KEYWORD_LOG_KEEP},
    )


class LogView(NamedTuple):
    """Where the keyword log stood in one snapshot: its first and last positions (0 and 0 when it is
    empty) and the namespace's epoch. A namespace dropped and made again gets another epoch and a log
    that restarts, so a position means nothing without its epoch: the new log can reach the very
    position an old reader's arrays are at."""

    first: int
    last: int
    epoch: uuid.UUID | None
    #: The count of label changes (``label_changes.generation``), which the log does not record: readers
    #: that hold documents' labels (memory_vectors.MemoryVectors) tell from it that theirs went stale.
    labels: int = -1

    def is_at(self, seq: int, epoch: uuid.UUID | None) -> bool:
        """Whether arrays at position ``seq`` of the namespace of ``epoch`` are where this view is."""
        return (self.last, self.epoch) == (seq, epoch)


#: The columns of a :class:`LogView`, as subqueries another statement can select (retrieve/search.py
#: reads them with the catalog, in the search's own statement).
LOG_FIRST_SQL = "(SELECT coalesce(min(seq), 0) FROM keyword_log)"
LOG_LAST_SQL = "(SELECT coalesce(max(seq), 0) FROM keyword_log)"
EPOCH_SQL = "(SELECT epoch FROM label_changes WHERE id = 1)"
LABELS_SQL = "(SELECT generation FROM label_changes WHERE id = 1)"
LOG_VIEW_SQL = f"{LOG_FIRST_SQL}, {LOG_LAST_SQL}, {EPOCH_SQL}, {LABELS_SQL}"


def log_view(first: Any, last: Any, epoch: Any, labels: Any) -> LogView:
    """A :class:`LogView` from the columns :data:`LOG_VIEW_SQL` selects."""
    return LogView(
        int(first),
        int(last),
        None if epoch is None else uuid.UUID(str(epoch)),
        -1 if labels is None else int(labels),
    )


def log_positions(conn: sa.Connection) -> LogView:
    """The keyword log's first and last positions and the namespace's epoch, as ``conn`` sees them."""
    return log_view(*conn.execute(sa.text(f"SELECT {LOG_VIEW_SQL}")).one())


@dataclass(frozen=True)
class LogStep:
    """What a reader that keeps arrays in step with the catalog (keyword.MemoryKeywordIndex,
    memory_vectors.MemoryVectors) must do before answering a search whose snapshot reads the log as
    ``view``:

    - ``current``: its arrays are at the view's last position, of its epoch, already;
    - ``replay``: apply :func:`log_changes` after its position up to ``last``;
    - ``reload``: load everything (first use, a log trimmed past its position, or a namespace made
      again, whose log restarted: another epoch, whatever its position);
    - ``behind``: the search's snapshot is older than the arrays (another search synced them past a
      commit this one's transaction began before): answer it some other way over its own snapshot,
      rather than loading everything back and, at the next search, forward again.
    """

    action: Literal["current", "replay", "reload", "behind"]
    view: LogView


def log_step(
    conn: sa.Connection, log: LogView | None, *, loaded: bool, seq: int, epoch: uuid.UUID | None
) -> LogStep:
    """The :class:`LogStep` of a reader whose arrays (if ``loaded``) are at position ``seq`` of the
    namespace of ``epoch``, for a search that read the log at ``log`` (read here when None)."""
    view = log or log_positions(conn)
    if not loaded or view.epoch != epoch:
        return LogStep("reload", view)
    if view.is_at(seq, epoch):
        return LogStep("current", view)
    if view.last < seq:
        return LogStep("behind", view)
    return LogStep("reload" if view.first > seq + 1 else "replay", view)


def log_changes(conn: sa.Connection, after: int, upto: int) -> dict[uuid.UUID, bool]:
    """What the log's entries after position ``after`` up to ``upto`` did to each version they name, in
    the order first named: True if it ended visible, False if retired. Readers that keep arrays in step
    with the catalog (keyword.MemoryKeywordIndex, memory_vectors.MemoryVectors) replay these."""
    entries = conn.execute(
        sa.text("SELECT document_id, added FROM keyword_log WHERE seq > :a AND seq <= :b ORDER BY seq"),
        {"a": after, "b": upto},
    ).all()
    net: dict[uuid.UUID, bool] = {}
    for doc_id, added in entries:
        net[doc_id] = bool(added)
    return net


def _bump_totals(conn: sa.Connection, chunks: int, tokens: int) -> None:
    conn.execute(
        sa.text(
            "UPDATE corpus_stats SET chunk_count = chunk_count + :c, "
            "token_total = token_total + :t WHERE id = 1"
        ),
        {"c": chunks, "t": tokens},
    )


def get_version(conn: sa.Connection, version_id: uuid.UUID) -> DocumentInfo:
    """One version by its own id; :class:`NotFoundError` if there is none."""
    row = conn.execute(
        sa.text(f"SELECT {_DOC_COLUMNS} FROM documents WHERE id = :id"), {"id": version_id}
    ).first()
    if row is None:
        raise NotFoundError(f"no document version with id {version_id}")
    return _row_to_info(row)


#: A document's current version first: the active one, else the newest.
_CURRENT_FIRST = "ORDER BY is_active DESC, version DESC"


def get_document(conn: sa.Connection, document_id: uuid.UUID) -> DocumentInfo:
    """A document's current version (the active one, else its newest); :class:`NotFoundError` if none."""
    row = conn.execute(
        sa.text(f"SELECT {_DOC_COLUMNS} FROM documents WHERE document_id = :id {_CURRENT_FIRST} LIMIT 1"),
        {"id": document_id},
    ).first()
    if row is None:
        raise no_document(str(document_id))
    return _row_to_info(row)


def no_document(ref: str) -> NotFoundError:
    """The answer for a document that does not exist and for one the caller may not see: in the same
    words, so that no one learns from a refusal that an id is taken in a scope they lack."""
    return NotFoundError(f"no document with id {ref!r}")


def no_version(document_id: uuid.UUID, version: int) -> NotFoundError:
    """The answer for a version the catalog no longer holds and for one the caller may not see (a
    replacement upload labels its own version only), in the same words."""
    return NotFoundError(
        f"document {document_id} has no version {version} (a replaced version is kept only while a "
        "conversation cites it)"
    )


def get_document_version(conn: sa.Connection, document_id: uuid.UUID, version: int) -> DocumentInfo:
    """Version ``version`` of a document; :class:`NotFoundError` if the catalog no longer holds it."""
    row = conn.execute(
        sa.text(f"SELECT {_DOC_COLUMNS} FROM documents WHERE document_id = :id AND version = :v"),
        {"id": document_id, "v": version},
    ).first()
    if row is None:
        raise no_version(document_id, version)
    return _row_to_info(row)


#: Over ``documents d``: whether citeline stores the version's original file (``has_original``; not for a
#: web page, of which it keeps the text only), and the web address it was read from (``source_url``,
#: NULL for a file). What readers are given to open a passage rests on these two.
ORIGIN_COLUMNS = (
    "d.file_path IS NOT NULL AS has_original, "
    "CASE WHEN d.source_uri ~ '^https?://' THEN d.source_uri END AS source_url"
)


@dataclass(frozen=True)
class CitedPassage:
    """A cited chunk as the catalog holds it now: where it is, and whether its version is current.

    ``current_version`` is the document's visible version (None when it has none: being rebuilt, or
    failed); ``superseded`` says that a newer version replaced the cited one.
    """

    chunk_id: int
    document_id: uuid.UUID
    version_id: uuid.UUID
    version: int
    document_name: str
    title: str | None
    content_type: str | None
    page: int
    start: int
    end: int
    section: str | None
    text: str
    current_version: int | None
    has_original: bool = True
    source_url: str | None = None
    #: ``[first, last]``: the rows of the source file the chunk holds (a CSV's), else None.
    rows: list[int] | None = None

    @property
    def superseded(self) -> bool:
        return self.current_version is not None and self.current_version != self.version


def cited_passages(
    conn: sa.Connection, chunk_ids: Sequence[int], *, access: Access = FULL_ACCESS
) -> dict[int, CitedPassage]:
    """The cited chunks the catalog still holds and ``access`` sees, by chunk id, whatever their
    version's state (a citation opens the version it cited). A chunk of a deleted document, or of one
    outside the grant, is missing from the result."""
    if not chunk_ids:
        return {}
    where, params = access.sql("d")
    rows = conn.execute(
        sa.text(
            "SELECT c.id, d.document_id, d.id AS version_id, d.version, d.name, d.title, d.content_type, "
            "c.page, c.start_offset, c.end_offset, c.section, c.text, "
            "(SELECT a.version FROM documents a WHERE a.document_id = d.document_id AND a.is_active) "
            f"AS current_version, {ORIGIN_COLUMNS}, c.rows "
            "FROM chunks c JOIN documents d ON d.id = c.document_id "
            f"WHERE c.id = ANY(:cited) AND {where}"
        ),
        {**params, "cited": list(chunk_ids)},
    )
    return {int(r[0]): CitedPassage(int(r[0]), r[1], r[2], int(r[3]), r[4], r[5], r[6], *r[7:]) for r in rows}


def relabel(conn: sa.Connection, document_id: uuid.UUID, labels: Labels) -> DocumentInfo:
    """Change a document's labels (unset fields kept) on every version it has: no re-embedding.

    Searches see the new labels from the commit on; a version being built swaps in with them.
    """
    current = get_document(conn, document_id)
    _lock_source(conn, current.source_uri)
    merged = labels.over(current)
    conn.execute(
        sa.text(
            "UPDATE documents SET category = :cat, tags = :tags, scopes = :scopes, "
            "metadata = CAST(:meta AS jsonb), updated_at = now() WHERE document_id = :id"
        ),
        {"id": document_id, **_label_params(merged)},
    )
    return get_document(conn, document_id)


def versions(conn: sa.Connection, document_id: uuid.UUID) -> list[DocumentInfo]:
    """Every version of a document the catalog holds (the active one, any in progress or failed, and
    superseded ones that live conversations cite)."""
    rows = conn.execute(
        sa.text(f"SELECT {_DOC_COLUMNS} FROM documents WHERE document_id = :id ORDER BY version"),
        {"id": document_id},
    )
    return [_row_to_info(r) for r in rows]


def find_documents(conn: sa.Connection, prefix: str) -> list[DocumentInfo]:
    """The current versions of the documents whose id starts with ``prefix`` (users type short ids).
    Only hex digits and dashes make a prefix: anything else (an empty string, a LIKE wildcard) names no
    document, where it would once have named all of them."""
    prefix = prefix.strip().lower()
    if not prefix or prefix.strip("0123456789abcdef-"):
        return []
    rows = conn.execute(
        sa.text(
            f"SELECT DISTINCT ON (document_id) {_DOC_COLUMNS} FROM documents WHERE document_id::text LIKE :p "
            "ORDER BY document_id, is_active DESC, version DESC"
        ),
        {"p": prefix + "%"},
    )
    return [_row_to_info(r) for r in rows]


def list_documents(conn: sa.Connection, *, access: Access = FULL_ACCESS) -> list[DocumentInfo]:
    """Every version ``access`` sees: the active ones and those that failed or are in progress."""
    where, params = access.sql("documents")
    rows = conn.execute(
        sa.text(f"SELECT {_DOC_COLUMNS} FROM documents WHERE {where} ORDER BY name, version"), params
    )
    return [_row_to_info(r) for r in rows]


def served_sources(conn: sa.Connection, source_uris: Sequence[str]) -> set[str]:
    """Which of these sources have an active version."""
    return set(
        conn.execute(
            sa.text("SELECT source_uri FROM documents WHERE source_uri = ANY(:s) AND is_active"),
            {"s": list(source_uris)},
        ).scalars()
    )


def version_files(conn: sa.Connection, source_uris: Sequence[str]) -> list[str]:
    """Stored originals referred to by any version of these sources."""
    return list(
        conn.execute(
            sa.text(
                "SELECT DISTINCT file_path FROM documents "
                "WHERE source_uri = ANY(:s) AND file_path IS NOT NULL"
            ),
            {"s": list(source_uris)},
        ).scalars()
    )


def file_in_use(conn: sa.Connection, file_path: str) -> bool:
    """Whether any version still refers to a stored original."""
    return (
        conn.execute(
            sa.text("SELECT 1 FROM documents WHERE file_path = :f LIMIT 1"), {"f": file_path}
        ).first()
        is not None
    )


def files_in_use(conn: sa.Connection) -> set[str]:
    """Every stored original some version refers to (one query, for sweeps over the whole store)."""
    rows = conn.execute(sa.text("SELECT DISTINCT file_path FROM documents WHERE file_path IS NOT NULL"))
    return set(rows.scalars())


def scopes_in_use(conn: sa.Connection, *, access: Access = FULL_ACCESS) -> list[str]:
    """The scopes carried by the documents ``access`` sees, sorted (for a scope selector)."""
    where, params = access.sql("d")
    rows = conn.execute(
        sa.text(f"SELECT DISTINCT unnest(d.scopes) FROM documents d WHERE {where} ORDER BY 1"), params
    ).scalars()
    return [str(scope) for scope in rows]


#: Above this many keyword postings, ``stats`` gives PostgreSQL's estimate of their number instead of
#: counting them: a count reads every row (about 22 ms for SciFact's 0.7 million, seconds for the
#: tens of millions of a corpus of a million chunks), and the admin page asks for statistics every
#: few seconds while it is open.
POSTINGS_COUNTED_UP_TO = 2_000_000


def _postings(conn: sa.Connection) -> int:
    """The number of keyword postings: exact up to :data:`POSTINGS_COUNTED_UP_TO`, then the planner's
    estimate (``pg_class.reltuples``, kept by autovacuum's ANALYZE)."""
    estimate = conn.execute(
        sa.text("SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass('postings')")
    ).scalar_one_or_none()
    if estimate is not None and estimate > POSTINGS_COUNTED_UP_TO:
        return int(estimate)
    return int(conn.execute(sa.text("SELECT count(*) FROM postings")).scalar_one())


def stats(conn: sa.Connection, *, access: Access = FULL_ACCESS) -> dict[str, Any]:
    """Counts over the catalog as ``access`` sees it, for ``citeline stats`` and ``GET /stats``.

    A grant bounded to scopes gets the counts of the documents it sees, and no figure about the
    database as a whole (its size, its postings).
    """
    where, params = access.sql("d")

    def grouped(column: str, active_only: bool) -> dict[str, int]:
        active = " AND d.is_active" if active_only else ""
        rows = conn.execute(
            sa.text(
                f"SELECT d.{column}, count(*) FROM documents d WHERE {where}{active} GROUP BY 1 ORDER BY 1"
            ),
            params,
        ).all()
        return {str(k): int(v) for k, v in rows}

    # Each document once, by its current version (the active one, else its newest), as GET /documents
    # lists it: counted per version, a re-ingest made two documents of one (its old version superseded)
    # and a version kept for a conversation's citation a third.
    current = conn.execute(
        sa.text(
            f"SELECT status, count(*) FROM (SELECT DISTINCT ON (d.document_id) d.status FROM documents d "
            f"WHERE {where} ORDER BY d.document_id, d.is_active DESC, d.version DESC) AS c "
            f"GROUP BY 1 ORDER BY 1"
        ),
        params,
    ).all()
    by_status = {str(k): int(v) for k, v in current}
    versions = grouped("status", False)
    types = grouped("content_type", True)
    models = grouped("embedding_model", True)
    out: dict[str, Any] = {
        "documents": int(sum(by_status.values())),
        "active_documents": int(sum(types.values())),
        "versions": int(sum(versions.values())),
        "by_status": by_status,
        "by_content_type": types,
        "embedding_models": models,
    }
    if access.unrestricted:
        totals = conn.execute(sa.text("SELECT chunk_count, token_total FROM corpus_stats WHERE id = 1")).one()
        out["chunks"] = int(totals[0])
        out["avg_chunk_terms"] = (float(totals[1]) / totals[0]) if totals[0] else 0.0
        out["keyword_postings"] = _postings(conn)
        out["database_bytes"] = int(
            conn.execute(
                sa.text(
                    "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = current_schema() AND c.relkind = 'r'"
                )
            ).scalar_one()
        )
    else:
        out["chunks"] = int(
            conn.execute(
                sa.text(
                    f"SELECT coalesce(sum(d.vector_count), 0) FROM documents d WHERE {where} AND d.is_active"
                ),
                params,
            ).scalar_one()
        )
    return out


def _labels_differ(doc: DocumentInfo, labels: Labels) -> bool:
    return (
        sorted(doc.scopes) != sorted(labels.scopes or ())
        or doc.category != (labels.category or None)
        or sorted(doc.tags) != sorted(labels.tags or ())
        or doc.metadata != (labels.metadata or {})
    )


def _set_labels(conn: sa.Connection, doc_id: uuid.UUID, labels: Labels) -> None:
    conn.execute(
        sa.text(
            "UPDATE documents SET category = :cat, tags = :tags, scopes = :scopes, "
            "metadata = CAST(:meta AS jsonb), updated_at = now() WHERE id = :id"
        ),
        {"id": doc_id, **_label_params(labels)},
    )


def _label_params(labels: Labels, *, as_json: bool = False) -> dict[str, Any]:
    """Labels as statement parameters (``as_json``: as fields of a JSON row, metadata unencoded)."""
    return {
        "cat": labels.category or None,  # "" removes the category: a document without one has NULL
        "tags": sorted(set(labels.tags or ())),
        "scopes": sorted(set(labels.scopes or ())),
        "meta": (labels.metadata or {}) if as_json else json.dumps(labels.metadata or {}),
        "by": labels.uploaded_by,
    }


def bind_analyzer(conn: sa.Connection, config: dict[str, Any], default: dict[str, Any]) -> None:
    """Fix the namespace's keyword analyzer to ``config``, or refuse one that differs from its index's.

    A namespace indexed before analyzers were recorded was indexed with ``default``.
    """
    row = conn.execute(
        sa.text("SELECT analyzer, chunk_count FROM corpus_stats WHERE id = 1 FOR UPDATE")
    ).one()
    stored, chunks = row[0], int(row[1])
    if stored is None and chunks:
        stored = default
    if stored == config and row[0] is not None:
        return
    if stored is not None and stored != config and chunks:
        changed = sorted(k for k in set(stored) | set(config) if stored.get(k) != config.get(k))
        raise ConfigError(
            f"this namespace's keyword index was built with a different analyzer ({', '.join(changed)} "
            f"differ: indexed {json.dumps({k: stored.get(k) for k in changed})}). Use the settings it was "
            "built with, or a new namespace (CITELINE_NAMESPACE) for the new analyzer."
        )
    conn.execute(
        sa.text("UPDATE corpus_stats SET analyzer = CAST(:a AS jsonb) WHERE id = 1"),
        {"a": json.dumps(config)},
    )


# -- listing for shells (GET /documents) ---------------------------------------------------------


@dataclass(frozen=True)
class DocumentQuery:
    """Which documents a listing shows, and which page of them. Unset fields do not filter.

    Each document appears once, as its current version (the active one, else its newest), and the
    filters apply to that version. ``scopes`` keeps documents carrying any of these scopes, as search's
    filter of several scopes takes any of them (universal documents, which carry none, are listed
    without it); ``category`` matches the category itself or any below it; ``name_contains`` is
    case-insensitive; ``source`` is the key a document was uploaded under, matched exactly, and
    ``source_prefix`` the start of such keys (one synced folder's, say), matched literally: a ``%`` or
    ``_`` in it is a character of the key. Both are read in the keys' Unicode form
    (:func:`source_key`); an empty prefix keeps every document uploaded under a key. ``content_type``
    is taken as search's filter takes one (:func:`~citeline.retrieve.filters.content_types`): stored
    (``text/csv``) or short, as ``docs list`` shows it (``csv``); an unknown one is refused.
    """

    status: str | None = None
    scopes: tuple[str, ...] | None = None
    category: str | None = None
    tag: str | None = None
    content_type: str | None = None
    name_contains: str | None = None
    source: str | None = None
    source_prefix: str | None = None
    #: None lists every match.
    limit: int | None = 50
    offset: int = 0

    def __post_init__(self) -> None:
        refuse_nul(self, "")
        if self.scopes is not None:
            if isinstance(self.scopes, str):  # a lone string would be its characters' scopes
                raise InvalidRequestError(f"scopes: a tuple of scopes, not the string {self.scopes!r}")
            object.__setattr__(self, "scopes", tuple(self.scopes))
            check_scopes(self.scopes)
        if self.content_type:
            [stored] = content_types([self.content_type], field="content_type")
            object.__setattr__(self, "content_type", stored)


@dataclass(frozen=True)
class DocumentPage:
    """One page of a listing and how many documents the whole listing holds."""

    documents: list[DocumentInfo]
    total: int
    limit: int | None
    offset: int


def query_documents(
    conn: sa.Connection, query: DocumentQuery, *, access: Access = FULL_ACCESS
) -> DocumentPage:
    """The documents ``access`` sees that match ``query``, by name, with the total count."""
    where, params = access.sql("documents")
    conds = [where]
    if query.status:
        conds.append("status = :q_status")
        params["q_status"] = query.status
    if query.scopes:
        conds.append("scopes && CAST(:q_scopes AS text[])")
        params["q_scopes"] = list(query.scopes)
    if query.category:
        condition, bound = category_condition("category", "q_cat", query.category)
        conds.append(condition)
        params.update(bound)
    if query.tag:
        conds.append(":q_tag = ANY(tags)")
        params["q_tag"] = query.tag
    if query.content_type:
        conds.append("content_type = :q_type")
        params["q_type"] = query.content_type
    if query.name_contains:
        conds.append("name ILIKE :q_name ESCAPE '\\'")
        params["q_name"] = "%" + like_escape(query.name_contains) + "%"
    by_source = []
    if query.source is not None:
        by_source.append("source_uri = :q_source")
        params["q_source"] = UPLOAD_KEY_SCHEME + source_key(query.source)
    if query.source_prefix is not None:
        by_source.append("source_uri LIKE :q_source_prefix ESCAPE '\\'")
        params["q_source_prefix"] = UPLOAD_KEY_SCHEME + like_escape(source_key(query.source_prefix)) + "%"
    conds += by_source
    # Picking each document's current version reads every version of every document; a key names a
    # few documents, found by index (documents_source_version, documents_source_pattern), so only
    # theirs are read. The key is matched again on the current version below, so a document is listed
    # by its current version's key alone, as for the other filters.
    narrow = (
        f"WHERE document_id IN (SELECT document_id FROM documents WHERE {' AND '.join(by_source)}) "
        if by_source
        else ""
    )
    current = (
        f"WITH current AS (SELECT DISTINCT ON (document_id) * FROM documents {narrow}"
        "ORDER BY document_id, is_active DESC, version DESC) "
    )
    condition = " AND ".join(conds)
    total = int(
        conn.execute(
            sa.text(f"{current}SELECT count(*) FROM current AS documents WHERE {condition}"), params
        ).scalar_one()
    )
    rows = conn.execute(
        sa.text(
            f"{current}SELECT {_DOC_COLUMNS} FROM current AS documents WHERE {condition} "
            # LIMIT NULL is no limit.
            "ORDER BY name, document_id LIMIT :q_limit OFFSET :q_offset"
        ),
        {**params, "q_limit": query.limit, "q_offset": query.offset},
    )
    return DocumentPage([_row_to_info(r) for r in rows], total, query.limit, query.offset)


# -- builds in progress for shells (GET /builds, citeline builds) --------------------------------


@dataclass(frozen=True)
class BuildInfo:
    """A version being built (``queued`` or ``processing``), or one whose build failed lately.

    The store records no progress within a build (a version's chunks arrive in the one transaction that
    swaps it in): ``attempts``, ``started_at`` and ``cancel_requested`` are what there is to know.
    """

    document_id: uuid.UUID
    version_id: uuid.UUID
    name: str
    title: str | None
    source_uri: str
    version: int
    status: str
    #: The version serving the document meanwhile; None for a document with none (a first upload).
    current_version: int | None
    embedding_model: str | None
    #: Built for a running model migration (a twin, staged when done), not to replace what serves.
    migration: bool
    attempts: int
    queued_at: datetime | None
    started_at: datetime | None
    #: When a failed build ended.
    finished_at: datetime | None
    #: Why it failed; for a queued one, why its last attempt was retried (if it was).
    error: str | None
    #: A running build asked to stop (it ends ``failed``, "cancelled").
    cancel_requested: bool
    scopes: list[str]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["document_id"] = str(self.document_id)
        out["version_id"] = str(self.version_id)
        for key in ("queued_at", "started_at", "finished_at"):
            out[key] = out[key].isoformat() if out[key] else None
        return out


@dataclass(frozen=True)
class BuildPage:
    """One page of the builds and how many the whole listing holds."""

    builds: list[BuildInfo]
    total: int
    limit: int | None
    offset: int


_BUILD_COLUMNS = (
    "d.document_id, d.id AS version_id, d.name, d.title, d.source_uri, d.version, d.status, "
    "(SELECT a.version FROM documents a WHERE a.document_id = d.document_id AND a.is_active) "
    "AS current_version, d.embedding_model, "
    "coalesce(d.embedding_model = (SELECT target_model FROM model_migrations WHERE status = 'running'), "
    "false) AS migration, d.attempts, d.queued_at, d.started_at, "
    "CASE WHEN d.status = 'failed' THEN d.processed_at END AS finished_at, d.error, d.cancel_requested, "
    "d.scopes"
)


def builds(
    conn: sa.Connection,
    *,
    failed_within: float | None = None,
    limit: int | None = None,
    offset: int = 0,
    access: Access = FULL_ACCESS,
) -> BuildPage:
    """The versions ``access`` sees that are queued or being built, and with ``failed_within`` (seconds)
    those whose build failed that recently, in one query with their total count.

    Running builds come first (longest running first), then the queue in the order runners claim it,
    then failures, latest first. ``pending`` versions wait to be asked for and are not builds yet.
    """
    where, params = access.sql("d")
    failed = (
        "OR (d.status = 'failed' AND d.processed_at >= now() - make_interval(secs => :b_failed))"
        if failed_within is not None
        else ""
    )
    # The count and the page in one statement; the count's row stays when the page is empty (an
    # offset past the end), so the total is known either way.
    rows = conn.execute(
        sa.text(
            f"WITH b AS (SELECT {_BUILD_COLUMNS}, "
            "CASE d.status WHEN 'processing' THEN 0 WHEN 'queued' THEN 1 ELSE 2 END AS rank, "
            "CASE d.status WHEN 'processing' THEN d.started_at WHEN 'queued' THEN d.queued_at END AS since, "
            "d.processed_at "
            f"FROM documents d WHERE {where} AND (d.status IN ('queued', 'processing') {failed})) "
            "SELECT t.total, p.* FROM (SELECT count(*) AS total FROM b) t LEFT JOIN LATERAL "
            "(SELECT * FROM b ORDER BY rank, since, processed_at DESC, version_id "
            # LIMIT NULL is no limit.
            "LIMIT :b_limit OFFSET :b_offset) p ON true"
        ),
        {**params, "b_failed": failed_within, "b_limit": limit, "b_offset": offset},
    ).all()
    fields = BuildInfo.__dataclass_fields__
    found = [
        BuildInfo(**{k: v for k, v in r._asdict().items() if k in fields})
        for r in rows
        if r.version_id is not None
    ]
    return BuildPage(found, int(rows[0].total), limit, offset)


def metric_counts(conn: sa.Connection) -> CatalogCounts:
    """The catalog's counts ``GET /metrics`` exports: versions by status, active versions, documents
    and chunks, in one round trip (the chunk count is kept in corpus_stats as chunks come and go)."""
    row = conn.execute(
        sa.text(
            "SELECT (SELECT coalesce(json_object_agg(status, n), '{}') FROM "
            "(SELECT status, count(*) AS n FROM documents GROUP BY status) AS s), "
            "(SELECT count(*) FROM documents WHERE is_active), "
            "(SELECT count(DISTINCT document_id) FROM documents), "
            "(SELECT chunk_count FROM corpus_stats WHERE id = 1)"
        )
    ).one()
    versions = row[0] if isinstance(row[0], dict) else json.loads(row[0])
    return CatalogCounts(
        versions={str(k): int(v) for k, v in versions.items()},
        active=int(row[1]),
        documents=int(row[2]),
        chunks=int(row[3] or 0),
    )
