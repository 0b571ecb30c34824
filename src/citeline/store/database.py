"""Opening the store: pick the server (embedded or external), check pgvector, migrate the namespace schema."""

from __future__ import annotations

import logging
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from pgvector.psycopg import register_vector
from sqlalchemy import event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import OperationalError, ProgrammingError

from citeline.errors import ExtensionMissingError, StoreError
from citeline.settings import Settings
from citeline.store.server import embedded_url, release_embedded
from citeline.store.vectors import SESSION_SETTINGS

log = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).parent / "migrations"
# Serialises migrations when several processes open a fresh store at once.
_MIGRATION_LOCK = 0x0C17E11E


def known_revisions() -> list[str]:
    """The schema revisions this citeline's migrations know, oldest first, read from their file names
    (``0024_added_at.py``) without importing them, so ``--version`` stays fast."""
    return sorted(p.name.split("_", 1)[0] for p in (MIGRATIONS / "versions").glob("[0-9]*_*.py"))


def head_revision() -> str:
    """The schema revision this citeline migrates every namespace to."""
    return known_revisions()[-1]


def schema_name(namespace: str) -> str:
    """The PostgreSQL schema that holds a namespace's tables."""
    return f"citeline_{namespace}"


def namespaces_in(conn: sa.Connection) -> list[str]:
    """The namespaces the database of ``conn`` holds, sorted."""
    prefix = schema_name("")
    names = conn.execute(
        sa.text("SELECT nspname FROM pg_namespace WHERE starts_with(nspname, :prefix)"), {"prefix": prefix}
    ).scalars()
    return sorted(name.removeprefix(prefix) for name in names)


def server_url(settings: Settings) -> str:
    """SQLAlchemy URL of the configured server, starting the embedded one if that is the mode."""
    if settings.database_url is None:
        return embedded_url(settings.data_dir)
    url = make_url(settings.database_url)
    return str(url.set(drivername="postgresql+psycopg").render_as_string(hide_password=False))


def release_server(settings: Settings) -> None:
    """Let go of this process's hold on the embedded server, if that is the mode (see
    :func:`~citeline.store.server.release_embedded`); an external server is not this process's."""
    if settings.database_url is None:
        release_embedded(settings.data_dir)


def connect(settings: Settings) -> Engine:
    """An engine bound to the namespace's schema, migrated to the newest revision."""
    url = server_url(settings)
    schema = schema_name(settings.namespace)
    engine = sa.create_engine(
        url,
        pool_pre_ping=True,
        connect_args={
            "options": " ".join(
                f"-c {name}={value}"
                for name, value in {"search_path": f"{schema},public", **SESSION_SETTINGS}.items()
            )
        },
    )
    try:
        with engine.begin() as conn:
            lock_migrations(conn)
            ensure_pgvector(conn, engine)
            conn.execute(sa.text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
            # Read under the lock: of processes opening an older namespace at once, one migrates it.
            found = _revision(conn, schema)
            if found is not None and (
                refusal := unknown_revision(found, f"namespace {settings.namespace!r} is at")
            ):
                # alembic would stop with a traceback ("Can't locate revision"); the transaction is
                # rolled back, so the namespace is left as the newer citeline left it.
                raise StoreError(f"{refusal}: a newer citeline migrated it; upgrade citeline")
            cfg = Config()
            cfg.set_main_option("script_location", str(MIGRATIONS))
            cfg.attributes["connection"] = conn
            cfg.attributes["schema"] = schema
            command.upgrade(cfg, "head")
            if found is not None and found != head_revision():
                # A migration cannot be undone (older code refuses the namespace from now on), and any
                # command may make it, a read-only one too: said at WARNING, so without -v as well.
                log.warning(
                    "migrated namespace %r: schema %s -> %s", settings.namespace, found, head_revision()
                )
    except OperationalError as exc:
        # psycopg's message spans lines (one per address tried); an error is one line.
        reason = " ".join(str(exc.orig).split())
        raise StoreError(f"cannot reach PostgreSQL at {_safe(url)}: {reason}") from exc
    # Only now does the vector type surely exist: from here on every pooled connection knows it,
    # so vectors read back (cached embeddings) are arrays, not strings.
    engine.dispose()
    event.listen(engine, "connect", lambda dbapi_conn, _record: register_vector(dbapi_conn))
    return engine


def unknown_revision(revision: str, subject: str) -> str | None:
    """Why this citeline cannot use a schema at ``revision`` (a newer citeline's), as "``subject``
    schema revision ..."; None if it knows the revision."""
    if revision in known_revisions():
        return None
    return (
        f"{subject} schema revision {revision}, which this citeline (schema {head_revision()}) does not know"
    )


def _revision(conn: sa.Connection, schema: str) -> str | None:
    """The schema revision of the namespace in ``schema``; None before its first migration."""
    table = conn.execute(sa.text("SELECT to_regclass(:t)"), {"t": f'"{schema}".alembic_version'}).scalar()
    if table is None:
        return None
    found = conn.execute(sa.text(f'SELECT version_num FROM "{schema}".alembic_version')).scalar()
    return None if found is None else str(found)


def lock_migrations(conn: sa.Connection) -> None:
    """Take, until ``conn``'s transaction ends, the lock under which a process creates and migrates a
    namespace's schema (restoring a backup takes it too)."""
    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK})


def ensure_pgvector(conn: sa.Connection, engine: Engine) -> None:
    """Enable pgvector in the database, or say why it cannot be."""
    installed = conn.execute(sa.text("SELECT 1 FROM pg_extension WHERE extname = 'vector'")).first()
    if installed:
        return
    available = conn.execute(sa.text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")).first()
    where = _safe(engine.url.render_as_string(hide_password=True))
    if not available:
        raise ExtensionMissingError(
            f"the PostgreSQL server at {where} does not have the pgvector extension. Install it on the "
            "server (e.g. the Debian package postgresql-<version>-pgvector), or unset "
            "CITELINE_DATABASE_URL to use citeline's embedded server."
        )
    try:
        with conn.begin_nested():
            conn.execute(sa.text("CREATE EXTENSION IF NOT EXISTS vector SCHEMA public"))
    except ProgrammingError as exc:
        raise ExtensionMissingError(
            f"pgvector is available on {where} but not enabled, and this user may not enable it: "
            "run 'CREATE EXTENSION vector;' once as a superuser."
        ) from exc


def _safe(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)
