"""Prewarming: a starting server reads what searches read (its model's HNSW index first, then the chunk
rows) into the page cache, within a budget; a database whose files are elsewhere has nothing to read."""

from __future__ import annotations

from pathlib import Path

from citeline.engine import Citeline
from citeline.store.prewarm import SearchFile, prewarm, search_files
from citeline.store.vectors import index_name
from tests.conftest import write


def _ingested(cl: Citeline, tmp_path: Path) -> Citeline:
    cl.ingest([write(tmp_path / "pump.txt", "Prime the pump before starting it. Never run the pump dry.")])
    return cl


def test_the_files_searches_read_come_model_index_first_then_chunk_rows(cl: Citeline, tmp_path: Path) -> None:
    _ingested(cl, tmp_path)
    with cl.engine.connect() as conn:
        files = search_files(conn, cl.embedder.model_id)
    relations = [f.relation for f in files]
    assert relations[0] == index_name(cl.embedder.model_id)
    assert relations.index("chunks") > relations.index(index_name(cl.embedder.model_id))
    assert {"chunks", "chunks_pkey", "documents"} <= set(relations)
    for file in files:
        assert file.path.is_file() and file.path.stat().st_size == file.size > 0


def test_a_database_whose_files_are_not_here_has_nothing_to_read(cl: Citeline, tmp_path: Path) -> None:
    _ingested(cl, tmp_path)
    with cl.engine.connect() as conn:
        assert search_files(conn, cl.embedder.model_id, data_directory=tmp_path / "elsewhere") == []


def test_prewarm_reads_the_files_in_order_and_stops_at_the_budget(tmp_path: Path) -> None:
    sizes = {"index": 300_000, "heap": 200_000, "pkey": 50_000}
    files = []
    for name, size in sizes.items():
        path = tmp_path / name
        path.write_bytes(b"x" * size)
        files.append(SearchFile(name, path, size))
    gone = SearchFile("gone", tmp_path / "gone", 10_000)
    assert prewarm(files, 0) == 0
    assert prewarm(files, 10**9) == 550_000
    assert prewarm([gone, *files], 350_000) == 350_000  # the index whole, then the heap's start
    assert prewarm(files[::-1], 100_000) == 100_000


def test_a_server_prewarms_within_its_setting(cl: Citeline, tmp_path: Path) -> None:
    _ingested(cl, tmp_path)
    with cl.engine.connect() as conn:
        total = sum(f.size for f in search_files(conn, cl.embedder.model_id))
    assert cl.prewarm() == total  # unset: half the available memory, far more than a test store
    with cl.derive(prewarm_mb=0) as off:
        assert off.prewarm() == 0
