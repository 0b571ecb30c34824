"""What both sides of ``make bench-peers`` share: the corpus entries, their scopes, the chunking, and
the memory reading. Standard library only, so importing it costs a measured process nothing."""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

#: Chunking of both stacks, in characters (LangChain's splitter counts characters too).
CHUNK_SIZE = 800
CHUNK_OVERLAP = 120

#: The two scopes; ``SCOPE_A`` is the one scoped searches name.
SCOPE_A = "half-a"
SCOPE_B = "half-b"


@dataclass(frozen=True)
class Doc:
    """One corpus entry, and the scope the benchmark gives it."""

    doc_id: str
    title: str
    text: str
    scope: str

    @property
    def body(self) -> str:
        """The text both stacks ingest: title, blank line, abstract (as ``citeline eval`` does)."""
        return f"{self.title}\n\n{self.text}" if self.title else self.text


def scope_of(position: int) -> str:
    """The scope of the corpus entry at ``position`` (0-based): alternate entries, so ``SCOPE_A`` holds
    half the corpus (the odd one out of an odd count) and neither half is one end of the file."""
    return SCOPE_A if position % 2 == 0 else SCOPE_B


def read_corpus(path: Path, limit: int | None = None, judged: Collection[str] = ()) -> list[Doc]:
    """The entries of a BEIR ``corpus.jsonl``, scoped: all of them, or ``limit`` of them, the ``judged``
    ones (relevant to some query) first, then the others, each in file order. Taking the judged ones
    first keeps the ranking figures of a small run meaningful; its corpus is just easier."""
    entries: list[tuple[str, str, str]] = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                item = json.loads(line)
                entries.append((str(item["_id"]), str(item.get("title") or ""), str(item.get("text") or "")))
    if limit is not None:
        first = [e for e in entries if e[0] in judged]
        entries = (first + [e for e in entries if e[0] not in judged])[:limit]
    return [Doc(doc_id, title, text, scope_of(n)) for n, (doc_id, title, text) in enumerate(entries)]


def group_by_scope(docs: Iterable[Doc]) -> dict[str, list[Doc]]:
    """The documents of each scope, in their order."""
    groups: dict[str, list[Doc]] = {}
    for doc in docs:
        groups.setdefault(doc.scope, []).append(doc)
    return groups


def outside_scope(ranked: Iterable[str], scopes: Mapping[str, str], scope: str) -> int:
    """How many hits (document ids) of a search for ``scope`` belong to a document of another scope or
    to no document of the corpus at all."""
    return sum(1 for doc_id in ranked if scopes.get(doc_id) != scope)


def pss_kib(pid: int) -> int:
    """The proportional set size of process ``pid`` in KiB (its private memory plus its share of the
    pages it shares), from ``/proc/<pid>/smaps_rollup``; 0 for a process that is gone."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return 0
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


def cpu_seconds(roots: Iterable[int], parents: Mapping[int, int]) -> float:
    """CPU seconds (user and system) used so far by ``roots`` and every process below them, with what
    their children that already exited used (so a database backend that quits is still counted)."""
    total = 0
    for pid in with_descendants(roots, parents):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        # Fields 14 to 17 of the stat line (utime, stime, cutime, cstime), counted from the state.
        total += int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
    return total / os.sysconf("SC_CLK_TCK")


def parent_pids(proc: Path = Path("/proc")) -> dict[int, int]:
    """Every running process's parent, ``{pid: ppid}``."""
    parents: dict[int, int] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        # The command name (field 2) is in parentheses and may hold spaces or ')': read after the last.
        fields = stat.rsplit(")", 1)[1].split()
        parents[int(entry.name)] = int(fields[1])
    return parents


def with_descendants(roots: Iterable[int], parents: Mapping[int, int]) -> set[int]:
    """``roots`` and every process below them."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found.add(pid)
        todo.extend(children.get(pid, ()))
    return found


def postmaster_pid(server_dir: Path) -> int | None:
    """The PostgreSQL server process whose data lies under ``server_dir`` (first line of its
    ``postmaster.pid``); ``None`` when no server runs there."""
    for pidfile in sorted(server_dir.rglob("postmaster.pid")):
        try:
            first = pidfile.read_text().split("\n", 1)[0].strip()
        except FileNotFoundError:
            continue
        if first.isdigit() and Path(f"/proc/{first}").exists():
            return int(first)
    return None
