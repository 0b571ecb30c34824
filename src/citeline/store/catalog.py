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
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray

from citeline.errors import NotFoundError
from citeline.store.models import Status

_DOC_COLUMNS = (
    "id, name, title, source_uri, content_type, file_path, content_hash, version, is_active, status, "
    "error, duration_ms, processed_at, page_count, vector_count, embedding_model, chunk_size, "
    "chunk_overlap, category, tags, scopes, metadata, uploaded_by, created_at, updated_at"
)


@dataclass(frozen=True)
class DocumentInfo:
    """One document version as the catalog holds it."""

    id: uuid.UUID
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
    created_at: datetime
    updated_at: datetime

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["id"] = str(self.id)
        for key in ("processed_at", "created_at", "updated_at"):
            out[key] = out[key].isoformat() if out[key] else None
        return out


class VersionStart(StrEnum):
    """What :func:`begin_version` did."""

    CREATED = "created"
    UNCHANGED = "unchanged"
    RELABELLED = "relabelled"


@dataclass(frozen=True)
class VersionSpec:
    """What identifies a version's content: if all of these match the active version, nothing changes."""

    content_hash: str
    embedding_model: str
    chunk_size: int
    chunk_overlap: int


@dataclass(frozen=True)
class Labels:
    """The descriptive fields of a document, which can change without re-embedding it.

    ``None`` means "keep what the source's current version has" (nothing, for a new source), so
    re-ingesting a folder without naming its scopes can never turn scoped documents universal.
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

    @property
    def text_hash(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


def _lock_source(conn: sa.Connection, source_uri: str) -> None:
    """Serialise version changes of one source across processes, for the transaction's life."""
    key = int.from_bytes(hashlib.blake2b(source_uri.encode(), digest_size=8).digest(), "big", signed=True)
    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})


def _row_to_info(row: sa.Row[Any]) -> DocumentInfo:
    return DocumentInfo(**row._asdict())


def active_version(conn: sa.Connection, source_uri: str) -> DocumentInfo | None:
    """The visible version of a source, if any."""
    row = conn.execute(
        sa.text(f"SELECT {_DOC_COLUMNS} FROM documents WHERE source_uri = :s AND is_active"),
        {"s": source_uri},
    ).first()
    return _row_to_info(row) if row else None


def begin_version(
    conn: sa.Connection,
    *,
    source_uri: str,
    name: str,
    spec: VersionSpec,
    labels: Labels,
    file_path: str | None = None,
) -> tuple[DocumentInfo, VersionStart]:
    """Start a new version of ``source_uri``, or recognise that its content is unchanged.

    When the active version already has this content hash, model and chunking, no version is created:
    its labels are updated in place if they differ (``RELABELLED``), else nothing changes (``UNCHANGED``).
    """
    _lock_source(conn, source_uri)
    current = active_version(conn, source_uri)
    labels = labels.over(current)
    if current is not None and (
        current.content_hash == spec.content_hash
        and current.embedding_model == spec.embedding_model
        and current.chunk_size == spec.chunk_size
        and current.chunk_overlap == spec.chunk_overlap
    ):
        if _labels_differ(current, labels):
            _set_labels(conn, current.id, labels)
            return get_document(conn, current.id), VersionStart.RELABELLED
        return current, VersionStart.UNCHANGED
    # file_path is recorded now, not at the swap, so nobody removes the original while this version is built.
    doc_id = _insert_version(conn, source_uri, name, Status.PROCESSING, labels, spec, file_path)
    return get_document(conn, doc_id), VersionStart.CREATED


def _insert_version(
    conn: sa.Connection,
    source_uri: str,
    name: str,
    status: Status,
    labels: Labels,
    spec: VersionSpec | None,
    file_path: str | None = None,
) -> uuid.UUID:
    """A new, inactive version row numbered after every earlier one of the source."""
    doc_id = uuid.uuid4()
    conn.execute(
        sa.text(
            "INSERT INTO documents (id, name, source_uri, file_path, content_hash, version, status, "
            "embedding_model, chunk_size, chunk_overlap, category, tags, scopes, metadata, uploaded_by) "
            "VALUES (:id, :name, :s, :fp, :h, "
            "(SELECT coalesce(max(version), 0) + 1 FROM documents WHERE source_uri = :s), "
            ":st, :m, :cs, :co, :cat, :tags, :scopes, CAST(:meta AS jsonb), :by)"
        ),
        {
            "id": doc_id,
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
    )
    return doc_id


def record_failure(
    conn: sa.Connection, *, source_uri: str, name: str, reason: str, labels: Labels, doc_id: uuid.UUID | None
) -> DocumentInfo:
    """Mark a version failed with ``reason`` (creating its row if it never got one), dropping its chunks.

    Older failed attempts of the same source are removed so the catalog holds one failure per source;
    the active version, if any, is left untouched.
    """
    _lock_source(conn, source_uri)
    labels = labels.over(active_version(conn, source_uri))
    if doc_id is None:
        doc_id = _insert_version(conn, source_uri, name, Status.FAILED, labels, None)
    conn.execute(sa.text("DELETE FROM chunks WHERE document_id = :id"), {"id": doc_id})
    conn.execute(
        sa.text(
            "UPDATE documents SET status = 'failed', error = :e, is_active = false, vector_count = 0, "
            "file_path = NULL, "
            "processed_at = now(), updated_at = now() WHERE id = :id"
        ),
        {"e": reason, "id": doc_id},
    )
    conn.execute(
        sa.text("DELETE FROM documents WHERE source_uri = :s AND status = 'failed' AND id <> :id"),
        {"s": source_uri, "id": doc_id},
    )
    return get_document(conn, doc_id)


def cached_vectors(
    conn: sa.Connection, model: str, text_hashes: Sequence[str]
) -> dict[str, NDArray[np.float32]]:
    """Vectors ``model`` already computed for any of these chunk texts: no text is embedded twice."""
    if not text_hashes:
        return {}
    rows = conn.execute(
        sa.text(
            "SELECT DISTINCT ON (text_hash) text_hash, embedding FROM chunks "
            "WHERE embedding_model = :m AND text_hash = ANY(:h)"
        ),
        {"m": model, "h": list(set(text_hashes))},
    ).all()
    # pgvector's loader gives Vector objects (recent releases) or arrays (older ones).
    return {h: np.asarray(v.to_numpy() if hasattr(v, "to_numpy") else v, dtype=np.float32) for h, v in rows}


def insert_chunks(
    conn: sa.Connection,
    document: DocumentInfo,
    model: str,
    rows: Sequence[ChunkRow],
    vectors: NDArray[np.float32],
) -> None:
    """Append chunks with their vectors and postings to a (still invisible) version, by COPY."""
    if not rows:
        return
    raw = conn.connection.driver_connection
    assert raw is not None
    ids = [
        r[0]
        for r in conn.execute(
            sa.text("SELECT nextval(pg_get_serial_sequence('chunks', 'id')) FROM generate_series(1, :n)"),
            {"n": len(rows)},
        )
    ]
    with raw.cursor() as cur:
        with cur.copy(
            "COPY chunks (id, document_id, version, chunk_index, text, text_hash, page, start_offset, "
            "end_offset, section, embedding, embedding_model, token_count) FROM STDIN"
        ) as copy:
            for cid, row, vec in zip(ids, rows, vectors, strict=True):
                copy.write_row(
                    (
                        cid,
                        document.id,
                        document.version,
                        row.chunk_index,
                        row.text,
                        row.text_hash,
                        row.page,
                        row.start,
                        row.end,
                        row.section,
                        vec,
                        model,
                        row.token_count,
                    )
                )
        with cur.copy("COPY postings (chunk_id, term, tf, dl, document_id) FROM STDIN") as copy:
            for cid, row in zip(ids, rows, strict=True):
                for term, tf in row.terms.items():
                    copy.write_row((cid, term, tf, row.token_count, document.id))


def activate(
    conn: sa.Connection,
    document: DocumentInfo,
    *,
    title: str,
    content_type: str,
    file_path: str | None,
    page_count: int,
    duration_ms: float,
) -> DocumentInfo:
    """Swap ``document`` in as its source's visible version, in the caller's transaction.

    Retires (deletes, with their chunks) every other version of the source and keeps the corpus totals
    in step.
    """
    _lock_log(conn)
    _lock_source(conn, document.source_uri)
    totals = conn.execute(
        sa.text("SELECT count(*), coalesce(sum(token_count), 0) FROM chunks WHERE document_id = :id"),
        {"id": document.id},
    ).one()
    count, tokens = int(totals[0]), int(totals[1])
    conn.execute(
        sa.text("UPDATE chunks SET total_chunks = :n WHERE document_id = :id"),
        {"n": count, "id": document.id},
    )
    _retire_others(conn, document.source_uri, keep=document.id)
    conn.execute(
        sa.text(
            "UPDATE documents SET is_active = true, status = 'completed', error = NULL, title = :t, "
            "content_type = :ct, file_path = :fp, page_count = :pc, vector_count = :n, duration_ms = :ms, "
            "processed_at = :now, updated_at = :now WHERE id = :id"
        ),
        {
            "t": title,
            "ct": content_type,
            "fp": file_path,
            "pc": page_count,
            "n": count,
            "ms": duration_ms,
            "now": datetime.now(UTC),
            "id": document.id,
        },
    )
    _bump_totals(conn, count, tokens)
    _log(conn, document.id, added=True)
    return get_document(conn, document.id)


def delete_document(conn: sa.Connection, doc_id: uuid.UUID) -> list[DocumentInfo]:
    """Delete a document: every version of its source, with all chunks, vectors and postings."""
    doc = get_document(conn, doc_id)
    _lock_log(conn)
    _lock_source(conn, doc.source_uri)
    removed = [
        _row_to_info(r)
        for r in conn.execute(
            sa.text(f"SELECT {_DOC_COLUMNS} FROM documents WHERE source_uri = :s"), {"s": doc.source_uri}
        )
    ]
    _retire_others(conn, doc.source_uri, keep=None)
    return removed


def _retire_others(conn: sa.Connection, source_uri: str, keep: uuid.UUID | None) -> None:
    active = conn.execute(
        sa.text(
            "SELECT d.id, count(c.id), coalesce(sum(c.token_count), 0) FROM documents d "
            "LEFT JOIN chunks c ON c.document_id = d.id "
            "WHERE d.source_uri = :s AND d.is_active GROUP BY d.id"
        ),
        {"s": source_uri},
    ).first()
    if active is not None and active[0] != keep:
        _bump_totals(conn, -int(active[1]), -int(active[2]))
        _log(conn, active[0], added=False)
    conn.execute(
        sa.text(
            "DELETE FROM documents WHERE source_uri = :s AND (CAST(:keep AS uuid) IS NULL OR id <> :keep)"
        ),
        {"s": source_uri, "keep": keep},
    )


#: Held from a keyword_log insert to its commit, so log order is commit order: a reader that has
#: seen entry n has seen every entry before it.
_LOG_LOCK = 0x0C17E106


def _lock_log(conn: sa.Connection) -> None:
    """Take the log lock. Transactions that write the log take it before any source lock, so two of
    them can never wait for each other's locks."""
    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOG_LOCK})


def _log(conn: sa.Connection, doc_id: uuid.UUID, *, added: bool) -> None:
    """Record a visibility change for in-process keyword indexes (see keyword.MemoryKeywordIndex)."""
    _lock_log(conn)
    conn.execute(
        sa.text("INSERT INTO keyword_log (document_id, added) VALUES (:id, :a)"), {"id": doc_id, "a": added}
    )


def _bump_totals(conn: sa.Connection, chunks: int, tokens: int) -> None:
    conn.execute(
        sa.text(
            "UPDATE corpus_stats SET chunk_count = chunk_count + :c, "
            "token_total = token_total + :t WHERE id = 1"
        ),
        {"c": chunks, "t": tokens},
    )


def get_document(conn: sa.Connection, doc_id: uuid.UUID) -> DocumentInfo:
    """One version by id; :class:`NotFoundError` if there is none."""
    row = conn.execute(
        sa.text(f"SELECT {_DOC_COLUMNS} FROM documents WHERE id = :id"), {"id": doc_id}
    ).first()
    if row is None:
        raise NotFoundError(f"no document with id {doc_id}")
    return _row_to_info(row)


def find_documents(conn: sa.Connection, prefix: str) -> list[DocumentInfo]:
    """Versions whose id starts with ``prefix`` (so users can type a short id)."""
    rows = conn.execute(
        sa.text(f"SELECT {_DOC_COLUMNS} FROM documents WHERE id::text LIKE :p ORDER BY created_at"),
        {"p": prefix.lower().replace("%", "").replace("_", "") + "%"},
    )
    return [_row_to_info(r) for r in rows]


def list_documents(conn: sa.Connection) -> list[DocumentInfo]:
    """Every version in the catalog: the active ones and those that failed or are in progress."""
    rows = conn.execute(sa.text(f"SELECT {_DOC_COLUMNS} FROM documents ORDER BY name, version"))
    return [_row_to_info(r) for r in rows]


def version_files(conn: sa.Connection, source_uri: str) -> list[str]:
    """Stored originals referred to by any version of a source."""
    return list(
        conn.execute(
            sa.text(
                "SELECT DISTINCT file_path FROM documents WHERE source_uri = :s AND file_path IS NOT NULL"
            ),
            {"s": source_uri},
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


def stats(conn: sa.Connection) -> dict[str, Any]:
    """Counts over the catalog, for ``citeline stats``."""
    by_status: dict[str, int] = dict(
        conn.execute(sa.text("SELECT status, count(*) FROM documents GROUP BY status ORDER BY status")).all()
    )
    totals = conn.execute(sa.text("SELECT chunk_count, token_total FROM corpus_stats WHERE id = 1")).one()
    models: dict[str, int] = dict(
        conn.execute(
            sa.text(
                "SELECT embedding_model, count(*) FROM documents WHERE is_active GROUP BY embedding_model"
            )
        ).all()
    )
    types: dict[str, int] = dict(
        conn.execute(
            sa.text("SELECT content_type, count(*) FROM documents WHERE is_active GROUP BY content_type")
        ).all()
    )
    postings = conn.execute(sa.text("SELECT count(*) FROM postings")).scalar_one()
    size = conn.execute(
        sa.text(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind = 'r'"
        )
    ).scalar_one()
    return {
        "documents": int(sum(by_status.values())),
        "active_documents": int(sum(types.values())),
        "by_status": {str(k): int(v) for k, v in by_status.items()},
        "by_content_type": {str(k): int(v) for k, v in types.items()},
        "embedding_models": {str(k): int(v) for k, v in models.items()},
        "chunks": int(totals[0]),
        "keyword_postings": int(postings),
        "avg_chunk_terms": (float(totals[1]) / totals[0]) if totals[0] else 0.0,
        "database_bytes": int(size),
    }


def _labels_differ(doc: DocumentInfo, labels: Labels) -> bool:
    return (
        sorted(doc.scopes) != sorted(labels.scopes or ())
        or doc.category != labels.category
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


def _label_params(labels: Labels) -> dict[str, Any]:
    return {
        "cat": labels.category,
        "tags": sorted(set(labels.tags or ())),
        "scopes": sorted(set(labels.scopes or ())),
        "meta": json.dumps(labels.metadata or {}),
        "by": labels.uploaded_by,
    }
