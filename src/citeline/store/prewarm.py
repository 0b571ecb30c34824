"""Read what every search reads into the page cache when a server starts, before it takes requests.

A search walks its model's HNSW index, and a filtered walk reads each chunk row it visits from the
heap to check its document. After a restart those pages are on disk until searches have read them,
one random read at a time. At two million chunks (a 43 GB store on a machine with 24 GB), with the page
cache dropped, the first 300 searches of a scope holding a tenth of the chunks took 59.7 ms p50 and
426 ms p99; prewarmed (16.5 s to read 7.9 GB when the process started), 24.6 and 51 ms, as with a warm
cache (docs/performance.md, "Two million chunks").

:func:`search_files` finds the files of those relations (the model's HNSW index first, then the
chunks heap and its primary key, then the documents), and :func:`prewarm` reads them, within a
budget of memory. Only asking the kernel to read ahead (``posix_fadvise(WILLNEED)``) returned at once,
and the first searches still waited on the disk (p99 229 ms in the same run). Both need the
database's files to be readable here: the embedded server, or a server on this machine whose files
this user may read. Otherwise there is nothing to read, and searches warm the cache as they go.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from citeline.store.vectors import index_name

log = logging.getLogger(__name__)

#: Relations every search reads, in the order worth caching; ``None`` stands for the model's HNSW index.
_RELATIONS: tuple[str | None, ...] = (None, "chunks", "chunks_pkey", "documents", "documents_pkey")

#: How much is read at a time.
_STEP = 64 << 20


@dataclass(frozen=True)
class SearchFile:
    """One file of a relation searches read (PostgreSQL splits a relation into 1 GB files)."""

    relation: str
    path: Path
    size: int


def search_files(conn: sa.Connection, model: str, *, data_directory: Path | None = None) -> list[SearchFile]:
    """The files of the relations a search of ``model`` reads, in the order to cache them; empty when
    the database's files are not readable from this process.

    ``data_directory`` is the server's; by default the server says where it is (which needs a
    superuser or ``pg_read_all_settings``, as the embedded server's user is).
    """
    if data_directory is None:
        try:
            with conn.begin_nested():
                data_directory = Path(conn.execute(sa.text("SHOW data_directory")).scalar_one())
        except sa.exc.DBAPIError:
            return []
    files: list[SearchFile] = []
    for relation in _RELATIONS:
        name = relation or index_name(model)
        found = conn.execute(
            sa.text("SELECT pg_relation_filepath(to_regclass(:name))"), {"name": name}
        ).scalar_one_or_none()
        if found is None:
            continue  # the model has no index yet, or the relation is missing
        first = data_directory / str(found)
        segment, path = 0, first
        while path.is_file():
            try:
                files.append(SearchFile(name, path, path.stat().st_size))
            except OSError:
                break
            segment += 1
            path = first.with_name(f"{first.name}.{segment}")
    return files


def prewarm(files: list[SearchFile], budget: int) -> int:
    """Read ``files`` into the page cache, in order, up to ``budget`` bytes; returns the bytes read.
    Returns once they are read: a server then takes requests with its pages cached. A file that
    cannot be opened (gone since, or not readable) is skipped."""
    if not files or budget <= 0:
        return 0
    done = 0
    buffer = bytearray(_STEP)
    view = memoryview(buffer)
    for file in files:
        if done >= budget:
            break
        try:
            fd = os.open(file.path, os.O_RDONLY)
        except OSError:
            continue
        try:
            wanted = min(file.size, budget - done)
            # Asking for the whole range first lets the kernel read ahead of the reads below, which
            # then wait for it (and copy each step into one buffer, a second or two for 8 GB).
            os.posix_fadvise(fd, 0, wanted, os.POSIX_FADV_WILLNEED)
            offset = 0
            while offset < wanted:
                read = os.preadv(fd, [view[: min(_STEP, wanted - offset)]], offset)
                if read <= 0:
                    break
                offset += read
            done += offset
        except OSError:
            continue
        finally:
            os.close(fd)
    return done
