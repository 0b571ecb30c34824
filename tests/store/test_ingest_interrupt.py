"""Ctrl-C during an ingest, while a batch is being embedded: the ingest stops without waiting for the
batch, and the store is left as any interruption leaves it, which the next ingest settles and finishes."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import sqlalchemy as sa

from citeline.engine import Citeline
from citeline.ingest import IngestInterrupted, IngestOptions, IngestResult, Outcome, Source
from citeline.settings import Settings
from citeline.store import catalog
from citeline.types import LoadedSource, Page
from tests.conftest import SHARED, write

#: Enough abstracts for several embedding batches: the first results are written while the next batch
#: is in the embedder.
ABSTRACTS = 240


def abstracts(folder: Path) -> Path:
    with (SHARED / "eval" / "scifact" / "corpus.jsonl").open(encoding="utf-8") as corpus:
        for _, line in zip(range(ABSTRACTS), corpus, strict=False):
            entry = json.loads(line)
            write(folder / f"{entry['_id']}.txt", f"{entry['title']}\n\n{entry['text']}")
    return folder


def test_ctrl_c_while_a_batch_is_embedded_stops_the_ingest_and_the_next_one_finishes(
    cl: Citeline, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = abstracts(tmp_path / "abstracts")
    stored: list[IngestResult] = []

    def progress(result: IngestResult) -> None:
        stored.append(result)
        if len(stored) == 1:  # the first batch is written; the next one is in the embedder
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(KeyboardInterrupt) as caught:
        cl.ingest(folder, progress=progress)

    with cl.engine.connect() as conn:
        completed = set(
            conn.execute(sa.text("SELECT name FROM documents WHERE status = 'completed'")).scalars()
        )
        building = set(
            conn.execute(sa.text("SELECT source_uri FROM documents WHERE status = 'processing'")).scalars()
        )
        served = set(conn.execute(sa.text("SELECT name FROM documents WHERE is_active")).scalars())
    # What was stored before the interruption (the batch written, reported or not) stays stored and
    # served; the versions being built are not served.
    done = {r.document.name for r in stored if r.outcome == Outcome.ADDED and r.document}
    assert done and done <= completed and building
    assert len(completed) + len(building) < ABSTRACTS
    assert served == completed
    # The interruption says what was done before it and what it leaves processing.
    assert isinstance(caught.value, IngestInterrupted)
    assert caught.value.results == stored and caught.value.building == len(building)

    # The next ingest settles the interrupted versions as any interruption does (failed as interrupted,
    # said in the log), builds the rest, and a failure record goes once its source has a new version.
    with caplog.at_level(logging.WARNING, logger="citeline.ingest"):
        again = cl.ingest(folder)
    assert catalog.INTERRUPTED in caplog.text
    assert {r.outcome for r in again} <= {Outcome.ADDED, Outcome.UNCHANGED}
    assert sum(r.outcome == Outcome.ADDED for r in again) == ABSTRACTS - len(completed)
    with cl.engine.connect() as conn:
        failed = conn.execute(
            sa.text("SELECT count(*) FROM documents WHERE status <> 'completed'")
        ).scalar_one()
        active = conn.execute(
            sa.text("SELECT count(*) FROM documents WHERE status = 'completed' AND is_active")
        ).scalar_one()
        # Every chunk belongs to a completed version: none left by the versions that were interrupted.
        stray = conn.execute(
            sa.text(
                "SELECT count(*) FROM chunks c JOIN documents d ON d.id = c.document_id "
                "WHERE d.status <> 'completed'"
            )
        ).scalar_one()
    assert failed == 0 and active == ABSTRACTS and stray == 0


def test_ctrl_c_on_citeline_ingest_says_what_was_added_and_what_the_next_command_settles(
    settings: Settings, tmp_path: Path
) -> None:
    folder = abstracts(tmp_path / "abstracts")
    base = [sys.executable, "-m", "citeline.cli", "--data-dir", str(settings.data_dir)]
    base += ["--namespace", settings.namespace]
    proc = subprocess.Popen([*base, "ingest", str(folder)], stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    lines = [proc.stderr.readline()]
    assert lines[0].startswith("added"), lines  # the first batch is written; the next is in the embedder
    proc.send_signal(signal.SIGINT)
    # Read from the same file object: communicate() with a timeout reads the pipe past what readline()
    # has buffered.
    lines += proc.stderr.read().splitlines()
    proc.wait(timeout=60)
    assert proc.returncode == 130, lines
    added = sum(line.startswith("added ") for line in lines)
    # One line says it all, last: nothing of Python's traceback.
    last = lines[-1]
    assert last.startswith(f"interrupted: {added} added before the stop; "), lines
    building = int(last.split("; ")[1].split()[0])
    assert building > 0 and last.endswith(
        "left processing: the next citeline command marks them failed (interrupted); "
        "run the same ingest again to build them"
    ), last
    assert not any("Traceback" in line for line in lines)

    done = subprocess.run([*base, "ingest", str(folder)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    # What was stored before the stop (reported or not) is unchanged; the rest, interrupted ones too, added.
    summary = re.search(r"(\d+) sources: (\d+) added, (\d+) unchanged;", done.stderr)
    assert summary is not None, done.stderr
    assert int(summary[1]) == ABSTRACTS and int(summary[2]) + int(summary[3]) == ABSTRACTS
    assert int(summary[3]) >= added


def test_ctrl_c_that_the_database_driver_turns_into_its_own_error_still_stops_the_ingest(
    cl: Citeline,
) -> None:
    # Ctrl-C landing in psycopg's wait, as a pooled connection is pinged, came out as the driver's error
    # raised while handling it ("can't change 'autocommit' now: connection in transaction status
    # ACTIVE"); taken as one source's failure, the ingest went on to build all the rest.
    def interrupted() -> LoadedSource:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise RuntimeError("can't change 'autocommit' now: connection in transaction status ACTIVE")  # noqa: B904

    def text(n: int) -> LoadedSource:
        return LoadedSource(
            "text/plain", f"note {n}", iter([Page(1, f"Maintenance note {n}: check the seals.")])
        )

    sources = [Source("first.txt", "memory://first", "first.txt", "h-first", interrupted)]
    sources += [Source(f"{n}.txt", f"memory://{n}", f"{n}.txt", f"h-{n}", partial(text, n)) for n in range(3)]
    reported: list[IngestResult] = []
    with pytest.raises(KeyboardInterrupt) as caught:
        cl.ingestor().ingest(sources, IngestOptions(), reported.append)
    assert isinstance(caught.value, IngestInterrupted)
    assert reported == [] and caught.value.building == len(sources)  # none failed, none built
