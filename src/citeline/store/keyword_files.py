"""The in-memory keyword index's bulk reads and its snapshots on disk.

**Bulk reads.** Loading the postings of a large store row by row costs Python a tuple, a dictionary
lookup and an array store per posting: at 100,000 chunks (7.4M postings) that took minutes and left
hundreds of megabytes of Python heap behind. Here PostgreSQL packs each version's postings into one
``bytea`` of fixed-width big-endian records (chunk id, term id, tf, dl), term ids coming from a
vocabulary the caller passed in, and numpy reads them in bulk: a binary COPY of one row per version.

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

#: One posting as PostgreSQL's ``int8send`` and ``int4send`` write it: chunk id, term id, tf, dl.
_RECORD = np.dtype([("chunk", ">i8"), ("term", ">i4"), ("tf", ">i4"), ("dl", ">i4")])
#: Raw records parsed at a time: bounds the memory a large load needs beyond its final arrays.
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

_COPY = """
COPY (
    SELECT d.slot, string_agg(
        int8send(p.chunk_id) || int4send(v.tid) || int4send(p.tf) || int4send(p.dl), ''::bytea
        ORDER BY p.chunk_id, p.term
    )
    FROM unnest(%(versions)s::uuid[], %(slots)s::int4[]) AS d(id, slot)
    JOIN postings p ON p.document_id = d.id
    JOIN unnest(%(terms)s::text[], %(tids)s::int4[]) AS v(term, tid) ON v.term = p.term
    GROUP BY d.slot
) TO STDOUT (FORMAT BINARY)
"""


@dataclass
class Postings:
    """Postings read in bulk: per chunk its id, length and document slot; per posting its term id,
    chunk (as an index into the per-chunk arrays) and tf. Chunks come grouped by document, in id order
    within each."""

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
    ``vocab``, which gains the terms it lacked. ``everything`` says ``versions`` are all the active
    versions, so the vocabulary is read from the term index instead of from their postings."""
    if everything:
        terms = conn.execute(sa.text(_ALL_TERMS)).scalars().all()
    else:
        terms = (
            conn.execute(
                sa.text("SELECT DISTINCT term FROM postings WHERE document_id = ANY(:ids)"),
                {"ids": list(versions)},
            )
            .scalars()
            .all()
        )
    tids = [vocab.setdefault(t, len(vocab)) for t in terms]
    raw = conn.connection.driver_connection
    assert raw is not None
    params = {"versions": list(versions), "slots": list(slots), "terms": list(terms), "tids": tids}
    parts: list[Postings] = []
    pending: list[bytes] = []
    pending_docs: list[tuple[int, int]] = []
    size = 0
    with raw.cursor() as cur, cur.copy(_COPY, params) as copy:
        copy.set_types(["int4", "bytea"])
        for slot, data in copy.rows():
            pending.append(data)
            pending_docs.append((slot, len(data) // _RECORD.itemsize))
            size += len(data)
            if size >= _PARSE_BYTES:
                parts.append(_parse(pending, pending_docs))
                pending, pending_docs, size = [], [], 0
    if pending:
        parts.append(_parse(pending, pending_docs))
    return _joined(parts)


def _parse(blobs: list[bytes], docs: list[tuple[int, int]]) -> Postings:
    records = np.frombuffer(b"".join(blobs), dtype=_RECORD)
    chunk = records["chunk"].astype(np.int64)
    first = np.ones(chunk.size, dtype=bool)
    first[1:] = chunk[1:] != chunk[:-1]
    starts = np.flatnonzero(first)
    doc = np.repeat(np.asarray([s for s, _ in docs], dtype=np.int64), [n for _, n in docs])
    return Postings(
        chunk_ids=chunk[starts],
        dl=records["dl"][starts].astype(np.float32),
        doc_slot=doc[starts],
        term_ids=records["term"].astype(np.int32),
        chunk_of=(np.cumsum(first) - 1).astype(np.int32),
        tfs=records["tf"].astype(np.float32),
    )


def _joined(parts: list[Postings]) -> Postings:
    if not parts:
        return Postings(
            np.empty(0, np.int64),
            np.empty(0, np.float32),
            np.empty(0, np.int64),
            np.empty(0, np.int32),
            np.empty(0, np.int32),
            np.empty(0, np.float32),
        )
    if len(parts) == 1:
        return parts[0]
    offsets = np.cumsum([0] + [p.chunk_ids.size for p in parts[:-1]])
    return Postings(
        chunk_ids=np.concatenate([p.chunk_ids for p in parts]),
        dl=np.concatenate([p.dl for p in parts]),
        doc_slot=np.concatenate([p.doc_slot for p in parts]),
        term_ids=np.concatenate([p.term_ids for p in parts]),
        chunk_of=np.concatenate([p.chunk_of + int(o) for p, o in zip(parts, offsets, strict=True)]),
        tfs=np.concatenate([p.tfs for p in parts]),
    )


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
