"""Changing the embedding model of a namespace whose vectors live in Chroma (embedded in the data
directory): the switch removes the retired space's vectors, a repair restores vectors in the space the
namespace serves, and a web page refreshed during a migration is built in both spaces. Two real packaged
models, as in tests/test_migration.py; a real web server on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa

from citeline.engine import Citeline
from citeline.ingest import IngestOptions, Outcome
from citeline.settings import Settings
from citeline.store.chroma import ChromaIndex
from citeline.store.database import schema_name
from tests.jobs import test_refresh
from tests.jobs.test_refresh import CHANGED, ORIGINAL, Site
from tests.test_migration import DOCS, L3, L6, wait_built

#: A real web server on loopback whose pages the test changes.
site = test_refresh.site


@pytest.fixture
def chroma(settings: Settings) -> Settings:
    """The test's settings with vectors in embedded Chroma, web pages on loopback allowed."""
    return settings.model_copy(update={"vector_backend": "chroma", "url_allow_private": True})


@pytest.fixture
def old(chroma: Settings, tmp_path: Path) -> Iterator[Citeline]:
    """A namespace serving L6 from Chroma, holding six documents."""
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, text in DOCS.items():
        (folder / name).write_text(text, encoding="utf-8")
    with Citeline(chroma.model_copy(update={"embedding_model": L6})) as cl:
        assert all(r.outcome is Outcome.ADDED for r in cl.ingest([folder]))
        yield cl
        with cl.engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema_name(chroma.namespace)}" CASCADE'))
        index = cl.vector_index
        assert isinstance(index, ChromaIndex)
        for collection in index.client.list_collections():
            if collection.name.startswith(f"citeline_{chroma.namespace}_"):
                index.client.delete_collection(collection.name)


def held(cl: Citeline, model: str) -> set[int]:
    """The chunk ids whose vectors of ``model`` Chroma holds for this namespace, read from Chroma
    itself (not through the catalog, which no longer knows retired chunks)."""
    index = cl.vector_index
    assert isinstance(index, ChromaIndex)
    ids: set[int] = set()
    for collection in index.client.list_collections():
        if collection.name.startswith(f"citeline_{cl.settings.namespace}_"):
            collection = index.client.get_collection(collection.name)
            if (collection.metadata or {}).get("citeline_model") == model:
                ids.update(int(i) for i in collection.get(include=[])["ids"])
    return ids


def active_chunks(cl: Citeline) -> set[int]:
    with cl.engine.connect() as conn:
        return set(
            conn.execute(
                sa.text(
                    "SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id WHERE d.is_active"
                )
            ).scalars()
        )


def migrate(cl: Citeline) -> None:
    """Build every document's twin with ``cl``'s model, in ``cl``'s process."""
    cl.start_jobs()
    cl.start_migration()
    wait_built(cl)


def test_the_switch_removes_the_retired_models_vectors_from_chroma(old: Citeline, chroma: Settings) -> None:
    before = active_chunks(old)
    assert held(old, L6) == before
    with Citeline(chroma.model_copy(update={"embedding_model": L3})) as new:
        migrate(new)
        _, switched = new.switch_model(force=True)
        assert switched
        after = active_chunks(new)
        # At the switch itself, not at the next start-up's repair.
        assert held(new, L6) == set() and held(new, L3) == after
        assert new.repair_vectors().removed == 0
        assert new.search("how to prime a pump")[0].document_name == "pumps.md"


def test_a_repair_restores_vectors_with_the_model_the_namespace_serves(
    old: Citeline, chroma: Settings
) -> None:
    """A process configured with another model (a migration not started yet) repairs in the served space."""
    [pumps] = [d for d in old.documents() if d.name == "pumps.md"]
    lost = [int(c["id"]) for c in old.chunks(pumps)]
    with old.engine.connect() as conn:
        old.vector_index.remove(conn, [pumps.version_id])
    with Citeline(chroma.model_copy(update={"embedding_model": L3})) as other:
        report = other.repair_vectors()
        assert (report.restored, report.unrestorable) == (len(lost), 0)
        assert held(other, L3) == set()
        with other.engine.connect() as conn:
            restored = other.vector_index.vectors(conn, lost)
    texts = [str(c["text"]) for c in old.chunks(pumps)]
    expected = old.embedder.embed(texts)
    for i, cid in enumerate(lost):
        assert float(np.dot(restored[cid], expected[i])) == pytest.approx(1.0, abs=1e-3)
    assert old.search("how to prime a pump")[0].document_name == "pumps.md"


def test_a_page_refreshed_during_a_migration_is_built_in_both_spaces(
    old: Citeline, chroma: Settings, site: Site
) -> None:
    site.pages["/pumps"] = (200, ORIGINAL)
    [added] = old.ingest([site.url("/pumps")], IngestOptions())
    assert added.document is not None
    page_id = added.document.id
    with Citeline(chroma.model_copy(update={"embedding_model": L3})) as new:
        migrate(new)
        site.pages["/pumps"] = (200, CHANGED)
        submission = new.refresh(page_id)
        assert submission.document.embedding_model == L6  # the served space, searchable once built
        assert new.refreshed(submission, timeout=300).outcome is Outcome.UPDATED
        wait_built(new)
        versions = [(v.embedding_model, v.status) for v in new.versions(page_id)]
        assert sorted(versions) == sorted([(L6, "completed"), (L3, "staged")])
        query = "how do I bleed the volute before the first start?"
        assert "quartzite" in old.search(query)[0].text
        _, switched = new.switch_model(force=True)
        assert switched and [(v.embedding_model, v.status) for v in new.versions(page_id)] == [
            (L3, "completed")
        ]
        assert "quartzite" in new.search(query)[0].text
        assert held(new, L6) == set() and held(new, L3) == active_chunks(new)
