"""A passage stored word for word in several documents is one hit that names its other copies."""

from __future__ import annotations

import asyncio
from pathlib import Path

from citeline.answer import Complete
from citeline.engine import Citeline
from citeline.ingest import IngestOptions
from citeline.retrieve.filters import Filters
from citeline.retrieve.search import SearchRequest
from citeline.settings import Settings
from tests.conftest import write

NOTICE = "Relief valve RV-2 opens at 6 bar. Check it every 500 hours and replace its seal every 2000 hours."


def _ingest(cl: Citeline, tmp_path: Path) -> None:
    cl.ingest([write(tmp_path / "pump-a.txt", NOTICE), write(tmp_path / "pump-a-copy.txt", NOTICE)])
    cl.ingest([write(tmp_path / "pump-b.txt", NOTICE)], IngestOptions(scopes=("line-b",)))
    cl.ingest([write(tmp_path / "boiler.txt", "The boiler's relief valve opens at 10 bar; test it yearly.")])


def test_copies_of_a_passage_are_one_hit_naming_the_others_and_the_next_passage_takes_their_place(
    cl: Citeline, tmp_path: Path
) -> None:
    _ingest(cl, tmp_path)

    hits = cl.search(SearchRequest("When does relief valve RV-2 open?", top_k=2))

    assert [Path(h.document_name).name for h in hits][1] == "boiler.txt"
    first = hits[0]
    named = {Path(first.document_name).name} | {Path(c.document_name).name for c in first.also_in}
    assert named == {"pump-a.txt", "pump-a-copy.txt", "pump-b.txt"}
    assert len(first.also_in) == 2 and all(c.page == 1 for c in first.also_in)
    # The hit is the copy ranked first: the three rank alike, so the lowest chunk id.
    assert first.chunk_id < min(c.chunk_id for c in first.also_in)
    assert first.as_dict()["also_in"][0]["document_id"] == str(first.also_in[0].document_id)


def test_a_filter_sees_only_the_copies_it_keeps(cl: Citeline, tmp_path: Path) -> None:
    _ingest(cl, tmp_path)

    hits = cl.search(SearchRequest("When does relief valve RV-2 open?", filters=Filters(scopes=("line-b",))))

    notices = [h for h in hits if h.text == NOTICE]
    # Universal documents are in every scope: the two unscoped copies and line-b's own.
    assert len(notices) == 1 and len(notices[0].also_in) == 2
    assert all(h.text != NOTICE for h in hits[1:])


def test_with_collapse_duplicates_off_every_copy_is_a_hit(
    cl: Citeline, settings: Settings, tmp_path: Path
) -> None:
    _ingest(cl, tmp_path)

    with Citeline(settings.model_copy(update={"collapse_duplicates": False})) as every:
        hits = every.search(SearchRequest("When does relief valve RV-2 open?", top_k=4))

    assert sorted(Path(h.document_name).name for h in hits) == [
        "boiler.txt",
        "pump-a-copy.txt",
        "pump-a.txt",
        "pump-b.txt",
    ]
    assert all(h.also_in == () for h in hits)


def test_the_same_rows_under_another_header_are_not_copies(cl: Citeline, tmp_path: Path) -> None:
    # A table's later chunks are read under its header row: the same rows under other columns say
    # something else. The two tables are set alike to the character, so their chunks cut at the same rows.
    rows = "\n".join(f"| M{n} | {n * 5} |" for n in range(6, 160))
    cl.ingest(
        [
            write(tmp_path / "torque.md", f"# Torque\n\n| Bolt | Torque Nm |\n| --- | --- |\n{rows}\n"),
            write(tmp_path / "length.md", f"# Length\n\n| Bolt | Length mm |\n| --- | --- |\n{rows}\n"),
        ]
    )

    hits = cl.search(SearchRequest("M120 bolt 600", top_k=20))

    later = [h for h in hits if h.context]
    texts = [h.text for h in later]
    assert any(texts.count(text) == 2 for text in texts)  # the same rows, once under each header
    assert {h.context.split("\n")[0] for h in later if h.context} == {
        "| Bolt | Torque Nm |",
        "| Bolt | Length mm |",
    }
    assert all(h.also_in == () for h in later)


def test_an_answer_names_the_copies_of_what_it_cites_and_its_stored_conversation_keeps_them(
    cl: Citeline, tmp_path: Path
) -> None:
    _ingest(cl, tmp_path)
    session = cl.chat()

    async def answer() -> Complete:
        events = [event async for event in session.ask("When does relief valve RV-2 open?")]
        complete = events[-1]
        assert isinstance(complete, Complete), events
        return complete

    complete = asyncio.run(answer())

    cited = next(c for c in complete.citations if c.excerpt.startswith("Relief valve RV-2"))
    copies = {Path(c.document_name).name for c in cited.also_in}
    assert copies | {Path(cited.document_name).name} == {"pump-a.txt", "pump-a-copy.txt", "pump-b.txt"}
    assert cited.as_dict()["also_in"] == [c.as_dict() for c in cited.also_in]

    # Read back as a reader reopens the conversation later: the citation still names its copies.
    def copies_on_reopening() -> list[dict[str, object]]:
        _, messages = cl.conversation(session.id)
        (stored,) = [m for m in messages if m.role == "assistant"]
        (again,) = [c for c in stored.citations if c["chunk_id"] == cited.chunk_id]
        return list(again["also_in"])

    assert copies_on_reopening() == [c.as_dict() for c in cited.also_in]
    # A copy deleted since is no longer named: it could not be opened.
    gone = cited.also_in[0]
    cl.delete(str(gone.document_id))
    assert copies_on_reopening() == [c.as_dict() for c in cited.also_in[1:]]
