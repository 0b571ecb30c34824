"""The pieces of ``make bench-peers`` whose mistakes would go unseen in its table: the memory reading,
the process tree it sums, the scopes it gives documents, the scope check and the ratio table. The
benchmark itself (both stacks, minutes of ingest) runs only under ``make bench-peers``."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench.peers import build_rows, distinct, render
from bench.peers_common import (
    SCOPE_A,
    SCOPE_B,
    cpu_seconds,
    group_by_scope,
    outside_scope,
    parent_pids,
    postmaster_pid,
    pss_kib,
    read_corpus,
    with_descendants,
)

from tests.conftest import SHARED

SCIFACT = SHARED / "eval" / "scifact"

#: A process that touches 64 MiB of private memory, says so, and waits.
_HOLD_64_MIB = (
    "import time; b = bytearray(64 << 20); b[::4096] = b'x' * 16384; print('ok', flush=True); time.sleep(60)"
)


@pytest.fixture
def holder() -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen([sys.executable, "-c", _HOLD_64_MIB], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "ok"
    yield process
    process.kill()
    process.wait()


def test_pss_counts_the_private_memory_a_process_touched_in_kib(holder: subprocess.Popen[str]) -> None:
    pss = pss_kib(holder.pid)
    assert 64 * 1024 <= pss < 64 * 1024 + 200 * 1024


def test_pss_of_a_process_that_is_gone_is_zero(holder: subprocess.Popen[str]) -> None:
    holder.kill()
    holder.wait()
    assert pss_kib(holder.pid) == 0


def test_cpu_seconds_count_a_busy_child_and_a_child_that_already_exited() -> None:
    # A child that spins 0.35 s of CPU and exits: its time moves to the parent's children's total,
    # which /proc counts in clock ticks (so a little under what the child measured itself).
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.35: pass"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys, time; subprocess.run([sys.executable, '-c', {spin!r}]); "
            "print('ok', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "ok"
        assert 0.3 <= cpu_seconds([parent.pid], parent_pids()) < 2.0
    finally:
        parent.kill()
        parent.wait()


def test_a_process_tree_includes_children_and_grandchildren_but_not_the_parent() -> None:
    shell = subprocess.Popen(["sh", "-c", "sh -c 'sleep 30' & sleep 30 & wait"])
    tree: set[int] = set()
    try:
        deadline = time.monotonic() + 10
        while True:
            parents = parent_pids()
            tree = with_descendants([shell.pid], parents)
            if len(tree) >= 4 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        # The shell, its inner shell, and two sleeps (the inner shell may exec its sleep: 3 or 4).
        assert shell.pid in tree and len(tree) in (3, 4)
        assert os.getpid() not in tree
        assert all(parents[pid] in tree for pid in tree - {shell.pid})
    finally:
        for pid in tree - {shell.pid}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shell.kill()
        shell.wait()


def test_the_postgres_server_is_found_from_its_pid_file_only_while_it_runs(tmp_path: Path) -> None:
    pgdata = tmp_path / "pg" / "pgdata"
    pgdata.mkdir(parents=True)
    assert postmaster_pid(tmp_path / "pg") is None
    (pgdata / "postmaster.pid").write_text(f"{os.getpid()}\n{pgdata}\n")
    assert postmaster_pid(tmp_path / "pg") == os.getpid()
    gone = subprocess.Popen(["true"])
    gone.wait()
    (pgdata / "postmaster.pid").write_text(f"{gone.pid}\n{pgdata}\n")
    assert postmaster_pid(tmp_path / "pg") is None


def test_one_scope_holds_half_the_corpus_alternating_through_it() -> None:
    docs = read_corpus(SCIFACT / "corpus.jsonl")
    assert len(docs) == 5183
    halves = group_by_scope(docs)
    assert set(halves) == {SCOPE_A, SCOPE_B}
    assert len(halves[SCOPE_A]) == 2592 and len(halves[SCOPE_B]) == 2591
    assert [d.scope for d in docs[:4]] == [SCOPE_A, SCOPE_B, SCOPE_A, SCOPE_B]
    # With a limit, the judged documents come first, then the others in file order, scoped alike.
    judged = {docs[5].doc_id, docs[2].doc_id}
    few = read_corpus(SCIFACT / "corpus.jsonl", 4, judged)
    assert [d.doc_id for d in few] == [docs[2].doc_id, docs[5].doc_id, docs[0].doc_id, docs[1].doc_id]
    assert [d.scope for d in few] == [SCOPE_A, SCOPE_B, SCOPE_A, SCOPE_B]
    assert docs[0].body.startswith(docs[0].title + "\n\n") and docs[0].body.endswith(docs[0].text)


def test_a_hit_outside_the_scope_or_the_corpus_is_counted() -> None:
    scopes = {"1": SCOPE_A, "2": SCOPE_B, "3": SCOPE_A}
    assert outside_scope(["1", "3", "1"], scopes, SCOPE_A) == 0
    assert outside_scope(["1", "2", "9"], scopes, SCOPE_A) == 2


def test_documents_rank_by_their_best_chunk() -> None:
    assert distinct(["b", "a", "b", "c", "a"]) == ["b", "a", "c"]


def _figures(**citeline: float) -> dict[str, dict[str, float]]:
    peer = {
        "ingest_docs_per_s": 4.0,
        "p50_ms": 10.0,
        "p99_ms": 20.0,
        "scoped_p50_ms": 50.0,
        "scoped_p99_ms": 80.0,
        "throughput_qps": 40.0,
        "cpu_ms_per_search": 30.0,
        "ndcg10": 0.67,
        "recall100": 0.9,
        "peak_mb": 2000.0,
        "outside_scope": 0.0,
    }
    return {"citeline": {**peer, **citeline}, "peer": peer}


def test_the_table_gives_citeline_over_peer_and_checks_each_target_on_its_side_of_the_bound() -> None:
    rows = {
        r.name: r
        for r in build_rows(
            _figures(
                ingest_docs_per_s=12.0,
                p50_ms=6.5,
                p99_ms=16.1,
                scoped_p50_ms=20.0,
                scoped_p99_ms=49.0,
                throughput_qps=59.0,
                ndcg10=0.744,
                peak_mb=700.0,
            )
        )
    }
    assert rows["ingest, documents/s"].ratio == pytest.approx(3.0) and rows["ingest, documents/s"].met
    assert (
        rows["search p50 ms, no filter"].ratio == pytest.approx(0.65) and rows["search p50 ms, no filter"].met
    )
    assert rows["search p99 ms, no filter"].met is False  # 0.805 > 0.8
    assert rows["search p50 ms, one scope (half the corpus)"].met  # exactly 0.4
    assert rows["search p99 ms, one scope"].met is False  # 0.6125 > 0.6
    assert rows["searches/s, 4 concurrent searchers"].met is False  # 1.475 < 1.5
    assert rows["CPU ms per search, 4 searchers (server included)"].met is None  # a diagnosis, no target
    assert rows["nDCG@10"].met
    assert rows["recall@100"].met is None and rows["recall@100"].ratio == pytest.approx(1.0)
    assert rows["peak memory MB (PSS, database server included)"].met  # exactly 0.35
    assert rows["hits outside the scope"].met


def test_one_hit_outside_a_scope_on_either_side_fails_the_check() -> None:
    figures = _figures()
    figures["peer"]["outside_scope"] = 1.0
    (row,) = [r for r in build_rows(figures) if r.name == "hits outside the scope"]
    assert row.met is False


def test_the_table_renders_every_row_with_its_ratio_and_verdict() -> None:
    table = render(build_rows(_figures(p50_ms=5.0, peak_mb=1000.0)))
    lines = table.splitlines()
    assert lines[0].startswith("| | citeline | LangChain + Chroma | ratio |")
    assert len(lines) == 2 + 11
    assert "| search p50 ms, no filter | 5.0 | 10.0 | 0.50 | ratio <= 0.65 | yes |" in lines
    assert (
        "| peak memory MB (PSS, database server included) | 1,000 | 2,000 | 0.50 | ratio <= 0.35 | no |"
        in lines
    )
