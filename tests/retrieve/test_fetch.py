"""Fetching chunks by id: the order asked for, only active chunks, distances on request."""

from __future__ import annotations

from pathlib import Path

from citeline.engine import Citeline
from tests.conftest import write


def test_chunks_come_back_in_the_order_asked_and_unknown_ids_skipped(cl: Citeline, tmp_path: Path) -> None:
    write(tmp_path / "a.md", "# Pumps\n\nPrime the centrifugal pump before first use.\n")
    write(tmp_path / "b.md", "# Frost\n\nDrain the volute before winter so frost cannot crack it.\n")
    cl.ingest([tmp_path])
    [a] = cl.search("prime the centrifugal pump")[:1]
    [b] = cl.search("frost cracks the volute")[:1]
    hits = cl.fetch([b.chunk_id, 999_999, a.chunk_id, b.chunk_id], query="frost cracks the volute")
    assert [h.chunk_id for h in hits] == [b.chunk_id, a.chunk_id]
    assert hits[0].text == b.text
    assert hits[0].distance < hits[1].distance


def test_a_retired_version_is_not_fetched(cl: Citeline, tmp_path: Path) -> None:
    path = write(tmp_path / "a.md", "# Pumps\n\nPrime the centrifugal pump before first use.\n")
    cl.ingest([path])
    [old] = cl.search("prime the pump")[:1]
    write(path, "# Pumps\n\nPrime the pump with water until the vent plug overflows.\n")
    cl.ingest([path])
    assert cl.fetch([old.chunk_id]) == []
