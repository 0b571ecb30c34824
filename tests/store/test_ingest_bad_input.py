"""One bad source in an ingest run fails alone, naming itself and the reason; every other source in the
run is stored, and what was stored before is kept.

Sources are written in batches (one COPY of many documents' chunks, one swap-in of many versions), so a
value PostgreSQL refuses used to fail every document in its batch, and end the run. Text that can be
cleaned is cleaned where it enters (loaders, and the split boundary for sources built in memory); what
cannot fails its own source; and a batch refused anyway is written again a document at a time.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from citeline import ingest
from citeline.engine import Citeline
from citeline.ingest import IngestOptions, IngestResult, Outcome, Source
from citeline.store.catalog import DocumentInfo
from citeline.types import LoadedSource, Page
from tests.conftest import write

GOOD = "Prime the centrifugal pump by filling its casing with water before first use."


def _memory(
    name: str,
    text: str,
    *,
    title: str = "",
    content_type: str = "text/plain",
    content_hash: str = "",
    **metadata: str | list[str],
) -> Source:
    """A source built in memory, as the evaluation builds its corpora."""

    def open_() -> LoadedSource:
        return LoadedSource(content_type, title or name, iter([Page(1, text)]), metadata)

    return Source(name, f"memory://{name}", name, content_hash or uuid.uuid4().hex, open_)


def _named(cl: Citeline, name: str) -> DocumentInfo:
    [doc] = [d for d in cl.documents() if d.name == name]
    return doc


def _outcomes(results: list[IngestResult]) -> dict[str, Outcome]:
    return {r.source: r.outcome for r in results}


def _active(cl: Citeline) -> dict[str, str]:
    with cl.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT source_uri, title FROM documents WHERE is_active")).all()
    return {uri: title for uri, title in rows}


def _texts(cl: Citeline, uri: str) -> list[str]:
    with cl.engine.connect() as conn:
        return list(
            conn.execute(
                sa.text(
                    "SELECT c.text FROM chunks c JOIN documents d ON d.id = c.document_id "
                    "WHERE d.source_uri = :u AND d.is_active ORDER BY c.chunk_index"
                ),
                {"u": uri},
            ).scalars()
        )


def test_a_file_name_that_is_not_utf8_is_ingested_with_the_rest(cl: Citeline, tmp_path: Path) -> None:
    # A name written in Latin-1 comes back from the file system with a lone surrogate for each odd
    # byte: the run's first statement refused it and every file in the folder with it.
    odd = Path(os.fsdecode(os.fsencode(tmp_path) + b"/caf\xe9.txt"))
    write(odd, "The caf\u00e9 pump is primed with water.")
    write(tmp_path / "good.txt", GOOD)
    results = cl.ingest([tmp_path])
    assert [r.outcome for r in results] == [Outcome.ADDED, Outcome.ADDED]
    assert {d.name for d in cl.documents()} == {"caf\ufffd.txt", "good.txt"}
    assert _named(cl, "caf\ufffd.txt").source_uri.endswith("/caf%E9.txt")  # the file, by its bytes


def test_a_missing_file_with_a_name_that_is_not_utf8_fails_alone(cl: Citeline, tmp_path: Path) -> None:
    missing = os.fsdecode(os.fsencode(tmp_path) + b"/gone\xe9.txt")
    good = write(tmp_path / "good.txt", GOOD)
    [failed, added] = cl.ingest([missing, good])
    assert failed.outcome is Outcome.FAILED and added.outcome is Outcome.ADDED
    assert failed.error is not None and failed.error.endswith("gone\ufffd.txt: file not found")


def test_a_nul_in_front_matter_does_not_fail_the_documents_ingested_with_it(
    cl: Citeline, tmp_path: Path
) -> None:
    (tmp_path / "guide.md").write_bytes(b"---\ntitle: Pump\x00 guide\n---\n# Pumps\n\nPrime the pump.\n")
    write(tmp_path / "good.txt", GOOD)
    results = cl.ingest([tmp_path])
    assert [r.outcome for r in results] == [Outcome.ADDED, Outcome.ADDED]
    assert _named(cl, "guide.md").title == "Pump guide"


def test_a_pdf_title_holding_a_nul_does_not_fail_the_run(cl: Citeline, tmp_path: Path) -> None:
    from tests.load.conftest import _pdf_bytes

    content = b"BT /F1 12 Tf 20 100 Td (Prime the pump before use.) Tj ET"
    (tmp_path / "pump.pdf").write_bytes(_pdf_bytes(content, (300, 200), r"Pump\000 manual"))
    write(tmp_path / "good.txt", GOOD)
    results = cl.ingest([tmp_path])
    assert [r.outcome for r in results] == [Outcome.ADDED, Outcome.ADDED]
    assert _named(cl, "pump.pdf").title == "Pump manual"


def test_a_long_unbroken_run_of_text_is_indexed(cl: Citeline, tmp_path: Path) -> None:
    # 1,200 CJK characters with no punctuation are one keyword term, too long for an index key: the
    # swap-in refused it, and the run ended.
    run = "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(1200))
    write(tmp_path / "cjk.txt", run)
    write(tmp_path / "good.txt", GOOD)
    results = cl.ingest([tmp_path])
    assert [r.outcome for r in results] == [Outcome.ADDED, Outcome.ADDED]


@pytest.mark.parametrize(
    ("text", "title", "metadata"),
    [
        ("Prime the pump \ud800 with water.", "Pump", {}),
        ("Prime the pump \x00 with water.", "Pump", {}),
        ("Prime the pump with water.", "Pump\x00 guide", {}),
        ("Prime the pump with water.", "Pump", {"site": "caf\udce9"}),
    ],
    ids=["lone surrogate in text", "NUL in text", "NUL in title", "lone surrogate in metadata"],
)
def test_text_built_in_memory_is_stored_with_what_postgresql_cannot_hold_replaced(
    cl: Citeline, text: str, title: str, metadata: dict[str, str]
) -> None:
    sources = [_memory("a", GOOD), _memory("odd", text, title=title, **metadata), _memory("b", GOOD)]
    results = cl.ingestor().ingest(sources, IngestOptions())
    assert _outcomes(results) == {"a": Outcome.ADDED, "odd": Outcome.ADDED, "b": Outcome.ADDED}
    stored = _named(cl, "odd")
    assert "\ufffd" in _texts(cl, "memory://odd")[0] + (stored.title or "") + str(stored.source_metadata)
    # One for one: the chunk's offsets into its page still hold.
    assert len(_texts(cl, "memory://odd")[0]) == len(text)


@pytest.mark.parametrize(
    ("bad", "refused"),
    [
        (_memory("odd", GOOD, content_type="x" * 200), "value too long for type character varying(100)"),
        (_memory("odd", GOOD, content_hash="h" * 100), "value too long for type character varying(64)"),
    ],
    ids=["content type too long (swap-in)", "content hash too long (version start)"],
)
def test_a_value_the_store_refuses_fails_its_source_alone(cl: Citeline, bad: Source, refused: str) -> None:
    results = cl.ingestor().ingest([_memory("a", GOOD), bad, _memory("b", GOOD)], IngestOptions())
    assert _outcomes(results) == {"a": Outcome.ADDED, "odd": Outcome.FAILED, "b": Outcome.ADDED}
    [failed] = [r for r in results if r.outcome is Outcome.FAILED]
    assert failed.error == f"odd: cannot be stored ({refused})"
    assert set(_active(cl)) == {"memory://a", "memory://b"}


def test_chunks_refused_in_a_batch_fail_only_their_source_and_keep_its_stored_version(
    cl: Citeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last line: a text no cleaning caught (here, the cleaning switched off) fails the COPY of its
    batch; the batch is written again document by document and only that document fails."""
    [first] = cl.ingestor().ingest([_memory("odd", GOOD, title="First")], IngestOptions())
    assert first.outcome is Outcome.ADDED
    monkeypatch.setattr(ingest, "storable", lambda text: text)
    sources = [_memory("a", GOOD), _memory("odd", "Prime \x00 the pump."), _memory("b", GOOD)]
    results = cl.ingestor().ingest(sources, IngestOptions())
    assert _outcomes(results) == {"a": Outcome.ADDED, "odd": Outcome.FAILED, "b": Outcome.ADDED}
    [failed] = [r for r in results if r.outcome is Outcome.FAILED]
    assert failed.error is not None and failed.error.startswith("odd: its text cannot be stored (")
    assert "0x00" in failed.error
    assert _active(cl) == {"memory://a": "a", "memory://odd": "First", "memory://b": "b"}
    assert _texts(cl, "memory://odd") == [GOOD]
