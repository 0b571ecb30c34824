"""Opening the store: pick the server (embedded or external), check pgvector, migrate the namespace schema."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from pgvector.psycopg import register_vector
from sqlalchemy import event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import DisconnectionError, OperationalError, ProgrammingError
from sqlalchemy.pool import ConnectionPoolEntry

from citeline.errors import ExtensionMissingError, StoreError
from citeline.settings import Settings
from citeline.store.server import embedded_url
from citeline.store.vectors import SESSION_SETTINGS

log = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).parent / "migrations"
# Serialises migrations when several processes open a fresh store at once.
_MIGRATION_LOCK = 0x0C17E11E
#: A pooled connection idle longer than this is pinged before it is handed out (see :func:`ping_when_idle`).
PING_AFTER_IDLE_SECONDS = 1.0


def schema_name(namespace: str) -> str:
    """The PostgreSQL schema that holds a namespace's tables."""
    return f"citeline_{namespace}"


def server_url(settings: Settings) -> str:
    """SQLAlchemy URL of the configured server, starting the embedded one if that is the mode."""
    if settings.database_url is None:
        return embedded_url(settings.data_dir)
    url = make_url(settings.database_url)
    return str(url.set(drivername="postgresql+psycopg").render_as_string(hide_password=False))


def connect(settings: Settings) -> Engine:
    """An engine bound to the namespace's schema, migrated to the newest revision."""
    url = server_url(settings)
    schema = schema_name(settings.namespace)
    engine = sa.create_engine(
        url,
        connect_args={
            "options": " ".join(
                f"-c {name}={value}"
                for name, value in {"search_path": f"{schema},public", **SESSION_SETTINGS}.items()
            )
        },
    )
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATION_LOCK})
            _ensure_pgvector(conn, engine)
            conn.execute(sa.text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
            cfg = Config()
            cfg.set_main_option("script_location", str(MIGRATIONS))
            cfg.attributes["connection"] = conn
            cfg.attributes["schema"] = schema
            command.upgrade(cfg, "head")
    except OperationalError as exc:
        raise StoreError(f"cannot reach PostgreSQL at {_safe(url)}: {exc.orig}") from exc
    # Only now does the vector type surely exist: from here on every pooled connection knows it,
    # so vectors read back (cached embeddings) are arrays, not strings.
    engine.dispose()
    event.listen(engine, "connect", lambda dbapi_conn, _record: register_vector(dbapi_conn))
    ping_when_idle(engine)
    return engine


def ping_when_idle(engine: Engine, idle_seconds: float = PING_AFTER_IDLE_SECONDS) -> None:
    """Check a pooled connection before handing it out once it has been idle ``idle_seconds``; a dead
    one is replaced (and the pool's older ones with it, as SQLAlchemy does for a lost connection).

    SQLAlchemy's ``pool_pre_ping`` pings on every checkout: one more round trip to the server on each
    search, the costliest one under load, where a search waits for the server process to be scheduled
    at each of its round trips. A connection back in the pool within the second was in use a moment
    ago; a server restart takes longer than that, so what it leaves behind has been idle and is pinged.
    """

    def checked_in(_dbapi: Any, record: ConnectionPoolEntry) -> None:
        record.info["idle_since"] = time.monotonic()

    def checked_out(dbapi: Any, record: ConnectionPoolEntry, _proxy: Any) -> None:
        since = record.info.pop("idle_since", None)
        if since is None or time.monotonic() - since <= idle_seconds:
            return
        try:
            engine.dialect.do_ping(dbapi)
        except engine.dialect.loaded_dbapi.Error as exc:
            # The pool takes this as a lost connection: it opens another and retries the checkout.
            raise DisconnectionError(f"the pooled connection no longer answers: {exc}") from exc

    event.listen(engine, "checkin", checked_in)
    event.listen(engine, "checkout", checked_out)


def _ensure_pgvector(conn: sa.Connection, engine: Engine) -> None:
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
