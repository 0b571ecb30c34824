"""Ctrl-C during an ingest, while a batch is being embedded: the ingest stops without waiting for the
batch, and the store is left as any interruption leaves it, which the next ingest settles and finishes."""

from __future__ import annotations

import json
import logging
import os
import signal
from pathlib import Path

import pytest
import sqlalchemy as sa

from citeline.engine import Citeline
from citeline.ingest import IngestResult, Outcome
from citeline.store import catalog
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

    with pytest.raises(KeyboardInterrupt):
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
