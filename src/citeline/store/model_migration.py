"""Changing the namespace's embedding model in the catalog: start, progress, switch, abort.

The catalog holds the whole state, so any process (server, CLI, Celery worker) sees the same
migration and a restart resumes it. While a migration runs:

- the namespace keeps serving its model (``corpus_stats.embedding_model``): searches embed queries
  with it and only ever meet its vectors;
- each document gets a *twin*: a version embedded by the target model, built like any version from
  the stored original, but kept ``staged`` (complete, invisible) by :func:`catalog.activate`;
- each new version of the served model registered meanwhile gets its twin at once
  (:func:`catalog.begin_versions`), so both spaces stay complete.

:func:`switch` then activates every document's newest staged twin and retires the old versions in one
transaction, under a table lock: readers see the old space or the new one, never both. :func:`abort`
discards the twins. The quality check that decides whether to switch is in
:mod:`citeline.eval.migration`.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from citeline.errors import ConflictError, InvalidRequestError
from citeline.store import catalog
from citeline.store.catalog import DocumentInfo, Labels, VersionRequest, VersionSpec
from citeline.store.models import Status

_COLUMNS = "id, source_model, target_model, status, forced, check_result, started_at, finished_at"


@dataclass(frozen=True)
class MigrationInfo:
    """One change of embedding model, as the catalog records it."""

    id: int
    source_model: str
    target_model: str
    #: ``running``, ``switched`` or ``aborted``.
    status: str
    #: Switched by the admin's ``--force`` although the quality check did not pass.
    forced: bool
    #: The last quality check's result (see :class:`citeline.eval.migration.CheckResult`), if one ran.
    check_result: dict[str, Any] | None
    started_at: datetime
    finished_at: datetime | None

    def as_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        for key in ("started_at", "finished_at"):
            out[key] = out[key].isoformat() if out[key] else None
        return out


@dataclass(frozen=True)
class Progress:
    """How far a migration is, in documents (each active document needs one staged twin)."""

    #: Active documents.
    total: int
    #: Active documents whose twin is built and staged.
    done: int
    #: Active documents whose twin is pending, queued or being built.
    building: int
    #: Active documents whose latest twin failed (and none is being built): they block the switch.
    failed: int

    def as_dict(self) -> dict[str, int]:
        return {"done": self.done, "total": self.total, "building": self.building, "failed": self.failed}


def _info(row: sa.Row[Any]) -> MigrationInfo:
    return MigrationInfo(**row._asdict())


def running(conn: sa.Connection) -> MigrationInfo | None:
    """The migration under way, if any."""
    row = conn.execute(sa.text(f"SELECT {_COLUMNS} FROM model_migrations WHERE status = 'running'")).first()
    return _info(row) if row else None


def latest(conn: sa.Connection) -> MigrationInfo | None:
    """The most recent migration, whatever its status."""
    row = conn.execute(sa.text(f"SELECT {_COLUMNS} FROM model_migrations ORDER BY id DESC LIMIT 1")).first()
    return _info(row) if row else None


def refuse_start(conn: sa.Connection, target: str) -> MigrationInfo | None:
    """Whether :func:`start` may move the namespace to ``target``, changing nothing: the migration to it
    already running, else None (start begins one); raises as :func:`start` does."""
    current = running(conn)
    if current is not None:
        if current.target_model == target:
            return current
        raise ConflictError(
            f"a migration from {current.source_model} to {current.target_model} is under way; switch or "
            "abort it (citeline migrate --switch | --abort) before starting another"
        )
    served = catalog.served_model(conn)
    if served == target:
        raise InvalidRequestError(f"this namespace already serves {target}")
    if served is None or catalog.ingest_model(conn, target) == target:
        raise InvalidRequestError(
            "this namespace holds no document: new documents are embedded by "
            f"{target} directly, no migration needed"
        )
    return None


def still_running(conn: sa.Connection, migration: MigrationInfo) -> None:
    """Raise :class:`ConflictError`, saying how it ended, when another process switched or aborted
    ``migration`` meanwhile: what was read about it (a quality check, say) no longer holds."""
    status = conn.execute(
        sa.text("SELECT status FROM model_migrations WHERE id = :id"), {"id": migration.id}
    ).scalar_one_or_none()
    if status == "running":
        return
    how = {
        "switched": f"switched (the namespace now serves {migration.target_model})",
        "aborted": f"aborted (the namespace still serves {migration.source_model})",
    }.get(str(status), "ended")
    raise ConflictError(
        f"the migration from {migration.source_model} to {migration.target_model} was {how} by another "
        "process meanwhile; see citeline migrate"
    )


def start(conn: sa.Connection, target: str) -> MigrationInfo:
    """Start moving the namespace to ``target``, or return the migration to it already running.

    Raises :class:`InvalidRequestError` when the namespace already serves ``target`` or holds no
    document (an empty namespace takes the configured model as it is), and :class:`ConflictError`
    when a migration to another model runs.
    """
    current = refuse_start(conn, target)
    if current is not None:
        return current
    row = conn.execute(
        sa.text(
            f"INSERT INTO model_migrations (source_model, target_model) VALUES (:s, :t) RETURNING {_COLUMNS}"
        ),
        {"s": catalog.served_model(conn), "t": target},
    ).one()
    return _info(row)


# For each active document (``a``): whether a newer version of the target model is in ``states``.
_TWIN = (
    "EXISTS (SELECT 1 FROM documents t WHERE t.source_uri = a.source_uri AND t.embedding_model = :m "
    "AND t.version > a.version AND t.status = ANY(CAST(:{name} AS text[])))"
)
_UNFINISHED = [Status.PENDING.value, Status.QUEUED.value, Status.PROCESSING.value]


def progress(conn: sa.Connection, migration: MigrationInfo) -> Progress:
    """Documents done (twin staged) out of the active documents, twins in the works, twins failed."""
    row = conn.execute(
        sa.text(
            "SELECT count(*), "
            f"count(*) FILTER (WHERE {_TWIN.format(name='staged')}), "
            f"count(*) FILTER (WHERE NOT {_TWIN.format(name='live')} AND {_TWIN.format(name='failed')}), "
            # Per active document, as done and failed are: a document uploaded during the migration is
            # built in both models before it is active, and counting its twin made building > total.
            f"count(*) FILTER (WHERE {_TWIN.format(name='unfinished')}) "
            "FROM documents a WHERE a.is_active"
        ),
        {
            "m": migration.target_model,
            "staged": [Status.STAGED.value],
            "live": [Status.STAGED.value, *_UNFINISHED],
            "failed": [Status.FAILED.value],
            "unfinished": _UNFINISHED,
        },
    ).one()
    return Progress(total=int(row[0]), done=int(row[1]), failed=int(row[2]), building=int(row[3]))


def without_twin(conn: sa.Connection, target: str, *, staged_only: bool = False) -> list[DocumentInfo]:
    """Active documents with no twin embedded by ``target`` staged or in the works (none yet, or the
    last one failed); ``staged_only``: with no staged twin."""
    live = [Status.STAGED.value] if staged_only else [Status.STAGED.value, *_UNFINISHED]
    rows = conn.execute(
        sa.text(
            f"SELECT a.document_id FROM documents a WHERE a.is_active AND NOT {_TWIN.format(name='live')} "
            "ORDER BY a.name, a.document_id"
        ),
        {"m": target, "live": live},
    ).scalars()
    return [catalog.get_document(conn, doc_id) for doc_id in rows]


def failures(conn: sa.Connection, migration: MigrationInfo) -> list[DocumentInfo]:
    """The failed twin of each active document that has no twin staged or being built, with its error."""
    rows = conn.execute(
        sa.text(
            "SELECT DISTINCT ON (t.source_uri) t.id FROM documents t JOIN documents a "
            "ON a.source_uri = t.source_uri AND a.is_active "
            f"WHERE t.status = 'failed' AND t.embedding_model = :m AND NOT {_TWIN.format(name='live')} "
            "ORDER BY t.source_uri, t.version DESC"
        ),
        {"m": migration.target_model, "live": [Status.STAGED.value, *_UNFINISHED]},
    ).scalars()
    return catalog.versions_by_id(conn, list(rows))


def queue_twins(
    conn: sa.Connection, migration: MigrationInfo, documents: list[DocumentInfo], *, chunking: tuple[int, int]
) -> list[DocumentInfo]:
    """Queue a twin of each of these active versions for a runner: same original, content, chunking
    and labels, embedded by the target model. ``chunking`` stands in for a version that recorded none."""
    requests = [
        VersionRequest(
            doc.source_uri,
            doc.name,
            VersionSpec(
                doc.content_hash or "",
                migration.target_model,
                doc.chunk_size or chunking[0],
                doc.chunk_overlap if doc.chunk_overlap is not None else chunking[1],
            ),
            Labels(),
            doc.file_path,
            status=Status.QUEUED,
        )
        for doc in documents
    ]
    return [info for info, _ in catalog.begin_versions(conn, requests)] if requests else []


def staged_versions(conn: sa.Connection, migration: MigrationInfo) -> list[DocumentInfo]:
    """Each source's newest staged twin that is newer than its active version (what a switch would
    make visible)."""
    rows = conn.execute(
        sa.text(
            "SELECT DISTINCT ON (t.source_uri) t.id FROM documents t JOIN documents a "
            "ON a.source_uri = t.source_uri AND a.is_active "
            "WHERE t.status = 'staged' AND t.embedding_model = :m AND t.version > a.version "
            "ORDER BY t.source_uri, t.version DESC"
        ),
        {"m": migration.target_model},
    ).scalars()
    return catalog.versions_by_id(conn, list(rows))


def record_check(conn: sa.Connection, migration: MigrationInfo, result: dict[str, Any]) -> None:
    """Keep a quality check's result with the migration (shown by stats and ``citeline migrate``).
    Raises :class:`ConflictError` when another process switched or aborted it meanwhile: the check
    then compared spaces that changed under it."""
    conn.execute(sa.text("SELECT 1 FROM model_migrations WHERE id = :id FOR UPDATE"), {"id": migration.id})
    still_running(conn, migration)
    conn.execute(
        sa.text("UPDATE model_migrations SET check_result = CAST(:r AS jsonb) WHERE id = :id"),
        {"r": json.dumps(result), "id": migration.id},
    )


def switch(conn: sa.Connection, migration: MigrationInfo, *, forced: bool) -> list[uuid.UUID]:
    """Make the target model the namespace's, in the caller's transaction: every staged twin becomes
    its document's active version, every older version is retired, queries embed with the target.
    Returns the versions it retired (deleted with their chunks), whose vectors a backend outside
    PostgreSQL still holds: the caller removes them once the transaction commits.

    The table is locked against writers for the switch (readers go on, and see the old space until
    the commit). Raises :class:`ConflictError`, switching nothing, while a version is queued or
    being built, or while an active document has no staged twin (the message names them).
    """
    conn.execute(sa.text("LOCK TABLE documents IN EXCLUSIVE MODE"))
    conn.execute(sa.text("SELECT 1 FROM model_migrations WHERE id = :id FOR UPDATE"), {"id": migration.id})
    still_running(conn, migration)
    busy = int(
        conn.execute(
            sa.text("SELECT count(*) FROM documents WHERE status IN ('queued', 'processing')")
        ).scalar_one()
    )
    if busy:
        raise ConflictError(
            f"{busy} document version{'s are' if busy != 1 else ' is'} queued or being built; switch "
            "once they are finished"
        )
    missing = without_twin(conn, migration.target_model, staged_only=True)
    if missing:
        names = ", ".join(d.name for d in missing[:5]) + (", ..." if len(missing) > 5 else "")
        raise ConflictError(
            f"{len(missing)} document{'s have' if len(missing) != 1 else ' has'} no version embedded by "
            f"{migration.target_model} ({names}): run citeline reingest to build them (a failed one "
            "says why in citeline docs show), or delete them"
        )
    staged = staged_versions(conn, migration)
    ids = [d.version_id for d in staged]
    keep = ids + list(
        conn.execute(
            sa.text("SELECT id FROM documents WHERE embedding_model = :m AND status = 'pending'"),
            {"m": migration.target_model},
        ).scalars()
    )
    chunks, tokens = conn.execute(
        sa.text("SELECT count(*), coalesce(sum(token_count), 0) FROM chunks WHERE document_id = ANY(:ids)"),
        {"ids": ids},
    ).one()
    sources = [d.source_uri for d in staged]
    versions = sa.text("SELECT id FROM documents WHERE source_uri = ANY(:s)")
    before = set(conn.execute(versions, {"s": sources}).scalars())
    catalog.retire_and_activate(conn, sources, ids, keep=keep, chunks=int(chunks), tokens=int(tokens))
    # The versions deleted: a retired one that a live conversation cites is kept (superseded), with its
    # vectors, until pruned.
    retired = sorted(before - set(conn.execute(versions, {"s": sources}).scalars()))
    # A pending version (registered, never asked to index) holds no vectors: it is built with the
    # model served when it is indexed. One with a pending twin is that twin's duplicate.
    conn.execute(
        sa.text(
            "DELETE FROM documents p WHERE p.status = 'pending' AND p.embedding_model = :s AND EXISTS "
            "(SELECT 1 FROM documents t WHERE t.source_uri = p.source_uri AND t.status = 'pending' "
            "AND t.embedding_model = :t)"
        ),
        {"s": migration.source_model, "t": migration.target_model},
    )
    conn.execute(
        sa.text(
            "UPDATE documents SET embedding_model = :t WHERE status = 'pending' AND embedding_model = :s"
        ),
        {"s": migration.source_model, "t": migration.target_model},
    )
    conn.execute(
        sa.text("UPDATE corpus_stats SET embedding_model = :t WHERE id = 1"), {"t": migration.target_model}
    )
    conn.execute(
        sa.text(
            "UPDATE model_migrations SET status = 'switched', forced = :f, finished_at = now() WHERE id = :id"
        ),
        {"f": forced, "id": migration.id},
    )
    return retired


def abort(conn: sa.Connection, migration: MigrationInfo) -> int:
    """Stop a migration and discard its twins: staged, queued, pending and failed ones are deleted
    (with their chunks), one being built is cancelled (its run stops and discards what it wrote).
    The namespace goes on serving its model. Returns how many twins were discarded."""
    conn.execute(sa.text("LOCK TABLE documents IN EXCLUSIVE MODE"))
    params = {"m": migration.target_model}
    conn.execute(
        sa.text(
            "UPDATE documents SET cancel_requested = true, updated_at = now() "
            "WHERE embedding_model = :m AND NOT is_active AND status = 'processing'"
        ),
        params,
    )
    deleted = conn.execute(
        sa.text(
            "DELETE FROM documents WHERE embedding_model = :m AND NOT is_active "
            "AND status IN ('pending', 'queued', 'staged', 'failed')"
        ),
        params,
    ).rowcount
    conn.execute(
        sa.text("UPDATE model_migrations SET status = 'aborted', finished_at = now() WHERE id = :id"),
        {"id": migration.id},
    )
    return int(deleted)


@dataclass(frozen=True)
class MigrationStatus:
    """A running migration and how far it is."""

    migration: MigrationInfo
    progress: Progress

    def as_dict(self) -> dict[str, Any]:
        return {**self.migration.as_dict(), **self.progress.as_dict()}


def status(conn: sa.Connection) -> MigrationStatus | None:
    """The running migration with its progress, if one runs."""
    migration = running(conn)
    return MigrationStatus(migration, progress(conn, migration)) if migration else None
