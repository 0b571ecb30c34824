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
            cfg = Config()
            cfg.set_main_option("script_location", str(MIGRATIONS))
            cfg.attributes["connection"] = conn
            cfg.attributes["schema"] = schema
            command.upgrade(cfg, "head")
    except OperationalError as exc:
        # psycopg's message spans lines (one per address tried); an error is one line.
        reason = " ".join(str(exc.orig).split())
        raise StoreError(f"cannot reach PostgreSQL at {_safe(url)}: {reason}") from exc
    # Only now does the vector type surely exist: from here on every pooled connection knows it,
    # so vectors read back (cached embeddings) are arrays, not strings.
    engine.dispose()
    event.listen(engine, "connect", lambda dbapi_conn, _record: register_vector(dbapi_conn))
    return engine


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
