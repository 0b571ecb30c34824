"""A process keeps what each search filter kept while the catalog stays put, and reads it again as soon as
a document is swapped in, deleted or relabelled: a kept scope never outlives a change to it."""

from __future__ import annotations

from pathlib import Path

import pytest

from citeline.engine import Citeline
from citeline.ingest import IngestOptions
from citeline.retrieve.filters import Filters
from citeline.retrieve.search import CatalogCache, SearchRequest, read_catalog
from citeline.settings import Settings
from tests.conftest import namespace_again, write

QUERY = "insulin dose"
TEXTS = {
    "a.txt": "Insulin dose for adults in journey A.",
    "b.txt": "Insulin dose for children in journey B.",
    "u.md": "# Insulin\n\nEvery journey checks the insulin dose twice.",
}


def _ingest(cl: Citeline, folder: Path, scopes: dict[str, tuple[str, ...]]) -> None:
    for name, text in TEXTS.items():
        cl.ingest([write(folder / name, text)], IngestOptions(scopes=scopes[name]))


@pytest.fixture
def journeys(cl: Citeline, tmp_path: Path) -> Citeline:
    """One document in journey ``a``, one in ``b``, one universal."""
    _ingest(cl, tmp_path, {"a.txt": ("a",), "b.txt": ("b",), "u.md": ()})
    return cl


def _names(cl: Citeline, scope: str) -> set[str]:
    return {h.document_name for h in cl.search(SearchRequest(QUERY, Filters(scopes=(scope,)), top_k=10))}


def _id(cl: Citeline, name: str) -> str:
    return str(next(d.id for d in cl.documents() if d.name == name))


def test_a_filter_read_again_while_nothing_changed_reuses_what_it_kept(journeys: Citeline) -> None:
    cache, model = CatalogCache(), journeys.embedder.model_id
    with journeys.engine.begin() as conn:
        first = read_catalog(conn, model, Filters(scopes=("a",)), cache).scope
        again = read_catalog(conn, model, Filters(scopes=("a",)), cache).scope
        other = read_catalog(conn, model, Filters(scopes=("b",)), cache).scope
        uncached = read_catalog(conn, model, Filters(scopes=("a",))).scope
    assert first is not None and again is first
    assert other is not None and other.document_ids != first.document_ids
    assert uncached == first and uncached is not first


def test_a_relabelled_document_leaves_and_enters_scopes_at_once(journeys: Citeline) -> None:
    assert _names(journeys, "a") == {"a.txt", "u.md"} == _names(journeys, "a")
    journeys.relabel(_id(journeys, "b.txt"), IngestOptions(scopes=("a",)))
    assert _names(journeys, "a") == {"a.txt", "b.txt", "u.md"}
    assert _names(journeys, "b") == {"u.md"}
    # And out again: a key bound to a scope never keeps seeing a document relabelled out of it.
    journeys.relabel(_id(journeys, "b.txt"), IngestOptions(scopes=("b",)))
    assert _names(journeys, "a") == {"a.txt", "u.md"}


def test_unchanged_content_ingested_with_new_labels_moves_at_once(journeys: Citeline, tmp_path: Path) -> None:
    assert _names(journeys, "b") == {"b.txt", "u.md"}
    journeys.ingest([tmp_path / "b.txt"], IngestOptions(scopes=("a",)))
    assert _names(journeys, "b") == {"u.md"}
    assert _names(journeys, "a") == {"a.txt", "b.txt", "u.md"}


def test_new_and_deleted_documents_enter_and_leave_a_kept_scope(journeys: Citeline, tmp_path: Path) -> None:
    assert _names(journeys, "a") == {"a.txt", "u.md"}
    elderly = write(tmp_path / "c.txt", "Insulin dose for the elderly.")
    journeys.ingest([elderly], IngestOptions(scopes=("a",)))
    assert _names(journeys, "a") == {"a.txt", "c.txt", "u.md"}
    journeys.delete(_id(journeys, "a.txt"))
    assert _names(journeys, "a") == {"c.txt", "u.md"}


def test_a_namespace_made_again_never_meets_the_scopes_of_the_one_before(
    journeys: Citeline, settings: Settings, tmp_path: Path
) -> None:
    """Same history, so the same log positions and label counts: only the namespace's epoch differs."""
    cache, model, journey_a = CatalogCache(), journeys.embedder.model_id, Filters(scopes=("a",))
    with journeys.engine.begin() as conn:
        before = read_catalog(conn, model, journey_a, cache)
    with namespace_again(settings) as again:
        _ingest(again, tmp_path / "again", {"a.txt": ("b",), "b.txt": ("b",), "u.md": ()})
        with again.engine.begin() as conn:
            after = read_catalog(conn, model, journey_a, cache)
    assert before.log[:2] == after.log[:2] and before.log.epoch != after.log.epoch
    assert before.scope is not None and after.scope is not None
    assert (len(before.scope.document_ids), len(after.scope.document_ids)) == (2, 1)


def test_the_cache_keeps_the_most_recently_used_filters(journeys: Citeline) -> None:
    cache, model = CatalogCache(), journeys.embedder.model_id
    filters = [Filters(scopes=(f"s{i}",)) for i in range(CatalogCache.SCOPES + 1)]
    with journeys.engine.begin() as conn:
        kept = [read_catalog(conn, model, f, cache).scope for f in filters]
        assert read_catalog(conn, model, filters[-1], cache).scope is kept[-1]
        assert read_catalog(conn, model, filters[0], cache).scope is not kept[0]
