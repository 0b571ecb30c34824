"""The in-memory keyword index's bulk reads and its snapshots on disk.

**Bulk reads.** Loading the postings of a large store row by row costs Python a tuple, a dictionary
lookup and an array store per posting: at 200,000 chunks (14.8M postings) that took four minutes and
left hundreds of megabytes of Python heap behind. Here PostgreSQL packs the postings into ``bytea``
values of fixed-width big-endian records, one row per term (or per version, for the chunks), and
numpy reads them in bulk from a binary COPY.

**Snapshots.** Every serving process used to build its own copy of the index, so n processes held n
copies and each paid the whole load at start-up. A process that loads the index writes its arrays to
``<data dir>/keyword/<store>/<log position>-.../`` (into a temporary folder, then renamed); the others
map the newest one read-only (``numpy.load(mmap_mode="r")``: the page cache is shared, so the arrays
are held once for all processes) and replay the keyword log from the snapshot's position, as any
index replays it. What changes afterwards lives in each process's small private segments and masks.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray

log = logging.getLogger(__name__)

#: A chunk as ``int8send(id) || int4send(token_count)`` writes it.
_CHUNK = np.dtype([("chunk", ">i8"), ("dl", ">i4")])
#: A posting of a known term as ``int8send(chunk_id) || int4send(tf)`` writes it.
_POSTING = np.dtype([("chunk", ">i8"), ("tf", ">i4")])
#: Raw posting records parsed at a time: bounds the memory a large load needs beyond its final arrays.
_PARSE_BYTES = 64 << 20

#: Every distinct term in the postings, one index probe each instead of a scan of every posting
#: (a loose index scan over ``postings_term``). Terms of retired versions may come too: harmless.
_ALL_TERMS = """
WITH RECURSIVE t AS (
    (SELECT term FROM postings ORDER BY term LIMIT 1)
    UNION ALL
    SELECT (SELECT p.term FROM postings p WHERE p.term > t.term ORDER BY p.term LIMIT 1)
    FROM t WHERE t.term IS NOT NULL
)
SELECT term FROM t WHERE term IS NOT NULL
"""

#: The chunks (with at least one posting) of each version asked for: one row per version.
_CHUNKS = """
COPY (
    SELECT c.document_id, string_agg(int8send(c.id) || int4send(coalesce(c.token_count, 0)), ''::bytea)
    FROM unnest(%(versions)s::uuid[]) AS d(id) JOIN chunks c ON c.document_id = d.id
    WHERE EXISTS (SELECT 1 FROM postings p WHERE p.chunk_id = c.id)
    GROUP BY c.document_id
) TO STDOUT (FORMAT BINARY)
"""

#: Every posting of each term asked for, from the term index alone (an index-only scan per term, which
#: reads the postings already grouped by term: no join, no sort): one row per term.
_TERM_POSTINGS = """
COPY (
    SELECT v.i, (
        SELECT string_agg(int8send(p.chunk_id) || int4send(p.tf), ''::bytea)
        FROM postings p WHERE p.term = v.term
    )
    FROM unnest(%(terms)s::text[]) WITH ORDINALITY AS v(term, i)
) TO STDOUT (FORMAT BINARY)
"""


@dataclass
class Postings:
    """Postings read in bulk: per chunk its id, length and document slot (chunks in id order); per
    posting its term id, chunk (an index into the per-chunk arrays) and tf."""

    chunk_ids: NDArray[np.int64]
    dl: NDArray[np.float32]
    doc_slot: NDArray[np.int64]
    term_ids: NDArray[np.int32]
    chunk_of: NDArray[np.int32]
    tfs: NDArray[np.float32]


def read_postings(
    conn: sa.Connection,
    versions: Sequence[uuid.UUID],
    slots: Sequence[int],
    vocab: dict[str, int],
    *,
    everything: bool = False,
) -> Postings:
    """The postings of ``versions`` (document slot ``slots[i]`` for ``versions[i]``), term ids from
    ``vocab``, which gains the terms it lacked.

    ``everything`` says ``versions`` are all the active versions: the postings are then read term by
    term from the term index (for 14.8M postings, 3 s against 30 s for any plan joining the postings
    with the versions), and those of other versions' chunks dropped here.
    """
    raw = conn.connection.driver_connection
    assert raw is not None
    slot_of = dict(zip(versions, slots, strict=True))
    chunk_parts: list[NDArray[Any]] = []
    chunk_docs: list[tuple[int, int]] = []
    with raw.cursor() as cur, cur.copy(_CHUNKS, {"versions": list(versions)}) as copy:
        copy.set_types(["uuid", "bytea"])
        for version, data in copy.rows():
            part = np.frombuffer(data, dtype=_CHUNK)
            chunk_parts.append(part)
            chunk_docs.append((slot_of[version], part.size))
    chunks = np.concatenate(chunk_parts) if chunk_parts else np.empty(0, dtype=_CHUNK)
    doc = np.repeat(np.asarray([s for s, _ in chunk_docs], dtype=np.int64), [n for _, n in chunk_docs])
    order = np.argsort(chunks["chunk"], kind="stable")
    chunk_ids = chunks["chunk"][order].astype(np.int64)
    dl = chunks["dl"][order].astype(np.float32)
    doc_slot = doc[order]
    if everything:
        term_ids, chunk_of, tfs = _term_postings(conn, chunk_ids, vocab)
    else:
        term_ids, chunk_of, tfs = _version_postings(conn, versions, chunk_ids, vocab)
    return Postings(chunk_ids, dl, doc_slot, term_ids, chunk_of, tfs)


def _term_postings(
    conn: sa.Connection, chunk_ids: NDArray[np.int64], vocab: dict[str, int]
) -> tuple[NDArray[np.int32], NDArray[np.int32], NDArray[np.float32]]:
    """Every posting of the chunks ``chunk_ids`` (sorted), read term by term."""
    terms = conn.execute(sa.text(_ALL_TERMS)).scalars().all()
    tids = np.asarray([vocab.setdefault(t, len(vocab)) for t in terms], dtype=np.int32)
    raw = conn.connection.driver_connection
    assert raw is not None
    parts: list[tuple[NDArray[np.int32], NDArray[np.int32], NDArray[np.float32]]] = []
    pending: list[bytes] = []
    counts: list[tuple[int, int]] = []
    size = 0

    def flush() -> None:
        records = np.frombuffer(b"".join(pending), dtype=_POSTING)
        term = np.repeat(np.asarray([t for t, _ in counts], dtype=np.int32), [n for _, n in counts])
        chunk = records["chunk"].astype(np.int64)
        at = np.searchsorted(chunk_ids, chunk)
        at[at == chunk_ids.size] = 0
        keep = chunk_ids[at] == chunk if chunk_ids.size else np.zeros(chunk.size, dtype=bool)
        parts.append((term[keep], at[keep].astype(np.int32), records["tf"][keep].astype(np.float32)))

    with raw.cursor() as cur, cur.copy(_TERM_POSTINGS, {"terms": list(terms)}) as copy:
        copy.set_types(["int8", "bytea"])
        for i, data in copy.rows():
            if not data:
                continue
            pending.append(data)
            counts.append((int(tids[i - 1]), len(data) // _POSTING.itemsize))
            size += len(data)
            if size >= _PARSE_BYTES:
                flush()
                pending, counts, size = [], [], 0
    if pending:
        flush()
    if not parts:
        return np.empty(0, np.int32), np.empty(0, np.int32), np.empty(0, np.float32)
    return (
        np.concatenate([p[0] for p in parts]),
        np.concatenate([p[1] for p in parts]),
        np.concatenate([p[2] for p in parts]),
    )


def _version_postings(
    conn: sa.Connection, versions: Sequence[uuid.UUID], chunk_ids: NDArray[np.int64], vocab: dict[str, int]
) -> tuple[NDArray[np.int32], NDArray[np.int32], NDArray[np.float32]]:
    """The postings of a few versions' chunks ``chunk_ids`` (sorted), through their chunks' index."""
    rows = conn.execute(
        sa.text(
            "SELECT p.chunk_id, p.term, p.tf FROM chunks c JOIN postings p ON p.chunk_id = c.id "
            "WHERE c.document_id = ANY(:ids)"
        ),
        {"ids": list(versions)},
    ).all()
    chunk = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    term_ids = np.fromiter(
        (vocab.setdefault(r[1], len(vocab)) for r in rows), dtype=np.int32, count=len(rows)
    )
    tfs = np.fromiter((r[2] for r in rows), dtype=np.float32, count=len(rows))
    return term_ids, np.searchsorted(chunk_ids, chunk).astype(np.int32), tfs


# --- snapshots ---------------------------------------------------------------------------------------

#: Bumped whenever the files' layout changes: a snapshot of another format is never read.
FORMAT = 1
#: Snapshots kept per store; older ones are deleted (a process still mapping one keeps its pages).
KEEP = 2


@contextlib.contextmanager
def loading(root: Path | None) -> Iterator[None]:
    """Held while an index loads: an exclusive lock on the store's snapshot folder, so processes
    starting together load from the catalog one at a time and the later ones find a snapshot. A
    folder that cannot be made (a read-only disk) only loses the lock, not the load."""
    if root is None:
        yield
        return
    try:
        root.mkdir(parents=True, exist_ok=True)
        handle = open(root / ".load.lock", "a+b")  # noqa: SIM115 (held across the yield)
    except OSError:
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def snapshot_root(data_dir: Path, database: str, namespace: str) -> Path:
    """Where the snapshots of one store live: one folder per database and namespace."""
    key = hashlib.sha256(f"{database}\0{namespace}".encode()).hexdigest()[:16]
    return data_dir / "keyword" / f"{namespace}-{key}"


@dataclass
class Snapshot:
    """An index's state at log position ``seq``: the arrays of :class:`MemoryKeywordIndex`, mapped
    read-only where they are large."""

    seq: int
    #: The document the log entry at ``seq`` names, to tell this store's log from another's.
    seq_document: uuid.UUID | None
    vocab: list[str]
    arrays: dict[str, NDArray[Any]]
    path: Path


def write_snapshot(
    root: Path,
    seq: int,
    seq_document: uuid.UUID | None,
    vocab: Iterable[str],
    arrays: dict[str, NDArray[Any]],
) -> Path | None:
    """Write a snapshot atomically (a temporary folder renamed into place); None if it could not be
    written (a read-only or full disk: the index then simply stays private to this process)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
        try:
            for name, array in arrays.items():
                np.save(tmp / f"{name}.npy", np.ascontiguousarray(array), allow_pickle=False)
            (tmp / "vocab.json").write_text(json.dumps(list(vocab), ensure_ascii=False), encoding="utf-8")
            meta = {
                "format": FORMAT,
                "seq": seq,
                "seq_document": str(seq_document) if seq_document else None,
            }
            (tmp / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
            final = root / f"{seq:020d}-{os.getpid()}-{tmp.name[5:]}"
            tmp.rename(final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    except OSError as exc:
        log.warning("keyword index snapshot not written to %s: %s", root, exc)
        return None
    _prune(root)
    return final


def _snapshots(root: Path) -> list[Path]:
    """Finished snapshots, newest log position first."""
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")), reverse=True)


def _prune(root: Path) -> None:
    for old in _snapshots(root)[KEEP:]:
        shutil.rmtree(old, ignore_errors=True)
    for tmp in root.glob(".tmp-*"):
        # A temporary folder older than a day was left by a process that died while writing.
        with contextlib.suppress(OSError):
            if tmp.stat().st_mtime < time.time() - 86_400:
                shutil.rmtree(tmp, ignore_errors=True)


def open_snapshot(
    root: Path, first: int, last: int, shared: Sequence[str], *, only: Path | None = None
) -> Snapshot | None:
    """The newest snapshot (or ``only`` that one) from which the log (positions ``first`` to ``last``)
    can be replayed, its ``shared`` arrays mapped read-only and the others read into memory; None if
    there is none."""
    for path in [only] if only else _snapshots(root):
        try:
            meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
            if meta.get("format") != FORMAT:
                continue
            seq = int(meta["seq"])
            # Replayable: the log still holds every entry after seq, and has not restarted below it.
            if seq > last or first > seq + 1:
                continue
            arrays = {
                f.stem: np.load(f, mmap_mode="r" if f.stem in shared else None, allow_pickle=False)
                for f in path.glob("*.npy")
            }
            vocab = json.loads((path / "vocab.json").read_text(encoding="utf-8"))
        except (OSError, ValueError, KeyError) as exc:
            log.warning("keyword index snapshot %s not readable: %s", path, exc)
            continue
        document = meta.get("seq_document")
        return Snapshot(seq, uuid.UUID(document) if document else None, vocab, arrays, path)
    return None
