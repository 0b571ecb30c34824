"""Changing the embedding model: searches never stop nor mix spaces, progress is reported, a quality
check decides the switch, which is atomic; abort discards; a restart resumes. Two real packaged
models: onnx:all-MiniLM-L6-v2 (int8, 6 layers) and onnx:paraphrase-MiniLM-L3-v2 (fp32, 3 layers)."""

from __future__ import annotations

import io
import json
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from citeline import engine as engine_module
from citeline.engine import Citeline
from citeline.errors import ConflictError
from citeline.eval.migration import overlap_check
from citeline.ingest import Outcome
from citeline.jobs.submit import Upload
from citeline.settings import Settings
from citeline.store.database import schema_name
from tests.conftest import SHARED, write

L6 = "onnx:all-MiniLM-L6-v2"
L3 = "onnx:paraphrase-MiniLM-L3-v2"
SCIFACT = SHARED / "eval" / "scifact"

DOCS = {
    "valves.md": "# Relief valves\n\nThe relief valve opens at 6 bar and must be tested every year.",
    "pumps.md": "# Pumps\n\nPrime the centrifugal pump by filling its casing with water before starting.",
    "boiler.txt": "The boiler is serviced in spring. Its burner nozzle is replaced every two years.",
    "fire.txt": "In a fire, everyone gathers at the north car park assembly point.",
    "forklift.md": "# Forklifts\n\nOnly trained drivers may operate a forklift; the speed limit is 10 km/h.",
    "lab.txt": "Lab coats and safety glasses are worn in the chemistry lab at all times.",
}
QUERIES = ["relief valve pressure", "how to prime a pump", "fire assembly point", "forklift speed"]


def drop(cl: Citeline) -> None:
    with cl.engine.begin() as conn:
        conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema_name(cl.settings.namespace)}" CASCADE'))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    for name, text in DOCS.items():
        write(tmp_path / "docs" / name, text)
    return tmp_path / "docs"


@pytest.fixture
def old(settings: Settings, folder: Path) -> Iterator[Citeline]:
    """A namespace serving L6, holding the six documents."""
    with Citeline(settings.model_copy(update={"embedding_model": L6})) as cl:
        assert all(r.outcome is Outcome.ADDED for r in cl.ingest([folder]))
        yield cl
        drop(cl)


def configured(settings: Settings, model: str, **more: object) -> Citeline:
    """Another process's view of the same namespace, configured with ``model``."""
    return Citeline(settings.model_copy(update={"embedding_model": model, **more}))


def chunk_models(cl: Citeline, chunk_ids: list[int]) -> set[str]:
    with cl.engine.connect() as conn:
        return set(
            conn.execute(
                sa.text("SELECT DISTINCT embedding_model FROM chunks WHERE id = ANY(:ids)"),
                {"ids": chunk_ids},
            ).scalars()
        )


def wait_built(cl: Citeline, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while (status := cl.migration(max_age=0.0)) is not None and status.progress.building:
        assert time.monotonic() < deadline, status.as_dict()
        time.sleep(0.2)


class Searcher(threading.Thread):
    """Searches the namespace without pause from another instance (another process, say), recording
    the chunks each search returned."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(daemon=True)
        self.cl = Citeline(settings)
        self.stop = threading.Event()
        self.seen: list[set[int]] = []
        self.errors: list[BaseException] = []

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                for query in QUERIES:
                    self.seen.append({h.chunk_id for h in self.cl.search(query)})
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)

    def finish(self) -> list[set[int]]:
        self.stop.set()
        self.join(120)
        self.cl.close()
        assert not self.errors, self.errors
        return self.seen


def test_searches_keep_the_old_model_during_a_migration_and_move_atomically_at_the_switch(
    old: Citeline, settings: Settings
) -> None:
    with old.engine.connect() as conn:
        old_space = set(conn.execute(sa.text("SELECT id FROM chunks")).scalars())
    searcher = Searcher(settings.model_copy(update={"embedding_model": L6}))
    searcher.start()
    # The searcher's first search loads its models: searches run before the migration starts.
    while not searcher.seen and searcher.is_alive():
        time.sleep(0.05)
    with configured(settings, L3) as new:
        new.start_jobs()
        migration, queued = new.start_migration()
        assert (migration.source_model, migration.target_model, len(queued)) == (L6, L3, len(DOCS))
        progress = []
        while (status := new.migration(max_age=0.0)) is not None and status.progress.building:
            progress.append(status.progress.done)
            time.sleep(0.05)
        assert status is not None and (status.progress.done, status.progress.total) == (6, 6)
        assert progress == sorted(progress) and all(0 <= p <= 6 for p in progress)
        stats = new.stats()
        assert stats["embedding_model"] == L6 and stats["configured_embedding_model"] == L3
        assert stats["migration"]["done"] == 6 and stats["migration"]["target_model"] == L3
        during = len(searcher.seen)
        # On six short documents, the two top-10s hold nearly the same chunks: the overlap check passes.
        result, switched = new.switch_model()
        assert result.method == "overlap@10" and result.passed and switched
        time.sleep(1.0)
        after = searcher.finish()
    with old.engine.connect() as conn:
        assert set(conn.execute(sa.text("SELECT DISTINCT embedding_model FROM chunks")).scalars()) == {L3}
        new_space = set(conn.execute(sa.text("SELECT id FROM chunks")).scalars())
        states = conn.execute(sa.text("SELECT status, count(*) FROM documents GROUP BY 1")).all()
        assert dict(states) == {"completed": 6}
    assert during > 0 and len(after) > during
    # Never an empty result for documents that exist, never hits from two spaces at once; the old
    # space until the switch, the new one after it.
    assert [hits for hits in after if not hits or not (hits <= old_space or hits <= new_space)] == []
    spaces = [L6 if hits <= old_space else L3 for hits in after]
    assert spaces[0] == L6 and spaces[-1] == L3
    assert spaces == sorted(spaces, key=lambda m: m == L3)
    assert old.served_model(refresh=True) == L3 and old.migration(max_age=0.0) is None
    assert old.stats()["chunks"] == 6


def test_the_switch_waits_for_every_document_to_have_its_new_version(
    old: Citeline, settings: Settings
) -> None:
    with configured(settings, L3) as new:
        new.start_migration()  # queued, but no runner here builds them
        status = new.migration(max_age=0.0)
        assert status is not None and (
            status.progress.done,
            status.progress.total,
            status.progress.building,
        ) == (
            0,
            6,
            6,
        )
        # A document uploaded now is built in both models before it is active: it is not one of the
        # six, and its twin must not count as one of theirs (building stayed within the total).
        new.submit(Upload("late.md", io.BytesIO(b"# Late\n\nUploaded during the migration.")))
        status = new.migration(max_age=0.0)
        assert status is not None
        assert (status.progress.done, status.progress.total, status.progress.building) == (0, 6, 6)
        with pytest.raises(ConflictError, match=r"0 of 6 documents are built .*\(6 queued or being built"):
            new.switch_model(force=True)
        assert new.served_model(refresh=True) == L6
        assert old.search("relief valve")[0].document_name == "valves.md"


def test_abort_discards_the_staged_versions_and_the_namespace_keeps_its_model(
    old: Citeline, settings: Settings
) -> None:
    with configured(settings, L3) as new:
        new.start_jobs()
        new.start_migration()
        wait_built(new)
        migration, discarded = new.abort_migration()
        assert discarded == 6 and migration.target_model == L3
        assert new.migration(max_age=0.0) is None and new.served_model(refresh=True) == L6
        with pytest.raises(ConflictError, match="no embedding-model migration"):
            new.switch_model(force=True)
    with old.engine.connect() as conn:
        assert set(conn.execute(sa.text("SELECT DISTINCT embedding_model FROM chunks")).scalars()) == {L6}
        assert conn.execute(sa.text("SELECT count(*) FROM documents")).scalar_one() == 6
    assert old.search("relief valve")[0].document_name == "valves.md"


@pytest.mark.parametrize("ending", ["switch", "abort"])
def test_a_check_that_another_process_overtook_says_how_the_migration_ended(
    old: Citeline, settings: Settings, monkeypatch: pytest.MonkeyPatch, ending: str
) -> None:
    with configured(settings, L3) as new:
        new.start_jobs()
        new.start_migration()
        wait_built(new)
        real_check = overlap_check

        overtook: list[str] = []

        def overtaken(*args: object, **kwargs: object) -> object:
            # Another process (a `citeline reingest` still waiting, say) ends the migration first.
            if not overtook:
                overtook.append(ending)
                if ending == "switch":
                    assert old.switch_model(force=True)[1]
                else:
                    old.abort_migration()
            return real_check(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(engine_module, "overlap_check", overtaken)
        served = L3 if ending == "switch" else L6
        # Not "did not pass, searches keep the old model" over a space that vanished under the check.
        message = rf"was {ending}\w* \(the namespace \w*\s?serves {served}\) by another process"
        with pytest.raises(ConflictError, match=message):
            new.switch_model()
        assert new.served_model(refresh=True) == served and new.migration(max_age=0.0) is None
    with old.engine.connect() as conn:
        # The check overtaken is not kept as the last check of a migration that has ended.
        kept = conn.execute(sa.text("SELECT check_result FROM model_migrations")).scalar_one()
        assert kept is None or kept["passed"] is True


def test_a_migration_resumes_after_a_restart(old: Citeline, settings: Settings) -> None:
    with configured(settings, L3) as first:
        first.start_migration()
        # This process builds two of the six, then stops.
        built = first.ingestor().run_jobs(limit=2)
        assert [r.outcome for r in built] == [Outcome.STAGED, Outcome.STAGED]
    with configured(settings, L3) as second:
        status = second.migration(max_age=0.0)
        assert status is not None and (status.progress.done, status.progress.building) == (2, 4)
        migration, queued = second.start_migration()  # the same migration, nothing queued twice
        assert migration.id == status.migration.id and queued == []
        second.start_jobs()
        wait_built(second)
        result, switched = second.switch_model()
        assert switched, result
    assert old.served_model(refresh=True) == L3
    assert old.search("prime the pump")[0].document_name == "pumps.md"


def test_documents_added_during_a_migration_are_embedded_in_both_spaces(
    old: Citeline, settings: Settings, tmp_path: Path
) -> None:
    with configured(settings, L3) as new:
        new.start_jobs()
        new.start_migration()
        wait_built(new)
        new.jobs.stop()  # the twin of what is added next is built by the process that adds it
        # Added meanwhile, by a process configured with either model: searchable at once with the old
        # model, and built with the new one for the switch.
        extra = write(tmp_path / "crane.md", "# Cranes\n\nThe overhead crane is inspected every month.")
        results = old.ingest([extra])
        assert sorted(r.outcome.value for r in results) == ["added", "staged"]
        assert old.search("overhead crane inspection")[0].document_name == "crane.md"
        status = new.migration(max_age=0.0)
        assert status is not None and (status.progress.done, status.progress.total) == (7, 7)
        _, switched = new.switch_model()
        assert switched
        hits = new.search("overhead crane inspection")
        assert hits[0].document_name == "crane.md" and chunk_models(new, [h.chunk_id for h in hits]) == {L3}


def test_an_upload_during_a_migration_queues_its_twin_for_the_runner(
    old: Citeline, settings: Settings
) -> None:
    with configured(settings, L3) as new:
        new.start_jobs()
        new.start_migration()
        wait_built(new)
        doc = new.submit(Upload("crane.md", io.BytesIO(b"The overhead crane is inspected monthly."))).document
        assert doc.embedding_model == L6  # the served model: searchable as soon as it is built
        new.wait(doc.id, timeout=300)
        wait_built(new)
        assert [(v.embedding_model, v.status) for v in new.versions(doc.id)] == [
            (L6, "completed"),
            (L3, "staged"),
        ]
        _, switched = new.switch_model()
        assert switched and [(v.embedding_model, v.status) for v in new.versions(doc.id)] == [
            (L3, "completed")
        ]


# -- the quality check with gold questions, on SciFact ---------------------------------------------


def scifact_subset(folder: Path, queries: int, distractors: int) -> None:
    """The abstracts relevant to the first ``queries`` SciFact claims, and ``distractors`` others, as
    files named by their corpus id (how the check matches the qrels to documents)."""
    qrels: dict[str, set[str]] = {}
    for line in (SCIFACT / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, doc, _ = line.split("\t")
        qrels.setdefault(qid, set()).add(doc)
    order = [json.loads(line)["_id"] for line in (SCIFACT / "queries.jsonl").read_text().splitlines()]
    wanted = set().union(*(qrels[q] for q in [q for q in order if q in qrels][:queries]))
    corpus = {}
    with (SCIFACT / "corpus.jsonl").open() as fh:
        for line in fh:
            item = json.loads(line)
            corpus[item["_id"]] = f"{item['title']}\n\n{item['text']}"
    others = sorted(set(corpus) - wanted)
    random.Random(0).shuffle(others)
    for doc in sorted(wanted) + others[:distractors]:
        write(folder / f"{doc}.txt", corpus[doc])


@pytest.mark.skipif(not SCIFACT.is_dir(), reason="needs ../shared/eval/scifact")
def test_the_gold_check_passes_a_better_model_and_refuses_a_worse_one_unless_forced(
    settings: Settings, tmp_path: Path
) -> None:
    scifact_subset(tmp_path / "corpus", queries=40, distractors=20)
    # A loss of up to 0.1 nDCG@10 is accepted to move to the 6-layer model; none to move back.
    with Citeline(settings.model_copy(update={"embedding_model": L3})) as weak:
        try:
            weak.ingest([tmp_path / "corpus"])
            with configured(settings, L6, migration_max_loss=0.1) as strong:
                strong.start_jobs()
                strong.start_migration()
                wait_built(strong)
                better, switched = strong.switch_model(gold=SCIFACT)
                assert better.method == "ndcg@10" and better.queries >= 40 and switched, better
                assert better.delta is not None and better.delta > 0 and better.old is not None
                assert better.new == pytest.approx(better.old + better.delta)
            with configured(settings, L3, migration_max_loss=0.0) as back:
                back.start_jobs()
                back.start_migration()
                wait_built(back)
                worse, switched = back.switch_model(gold=SCIFACT)
                assert not worse.passed and not switched
                assert worse.delta is not None and worse.delta_ci is not None and worse.delta_ci[0] < 0
                assert back.served_model(refresh=True) == L6  # refused: nothing changed
                status = back.migration(max_age=0.0)
                kept = status.migration.check_result if status else None
                assert kept is not None and kept["passed"] is False and kept["delta"] == worse.delta
                forced, switched = back.switch_model(gold=SCIFACT, force=True)
                assert switched and not forced.passed
            with weak.engine.connect() as conn:
                row = conn.execute(sa.text("SELECT status, forced FROM model_migrations ORDER BY id")).all()
            assert [tuple(r) for r in row] == [("switched", False), ("switched", True)]
            assert weak.served_model(refresh=True) == L3
        finally:
            drop(weak)


def test_a_namespace_with_nothing_indexed_takes_the_configured_model_without_a_migration(
    settings: Settings, folder: Path
) -> None:
    with configured(settings, L3) as cl:
        try:
            with pytest.raises(Exception, match="holds no document"):
                cl.start_migration()
            cl.ingest([folder])
            assert cl.served_model(refresh=True) == L3
        finally:
            drop(cl)
