"""One conformance suite for every vector index (Haystack's pattern): pgvector, Chroma embedded in the data
directory, and a real ``chroma run`` server on loopback. Each test runs the whole pipeline (ingest with
the packaged embedder, hybrid search) against each backend and expects the same behaviour."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa

from citeline.engine import Citeline
from citeline.errors import ModelMismatchError
from citeline.ingest import IngestOptions
from citeline.retrieve.filters import Filters
from citeline.retrieve.search import SearchRequest, read_catalog
from citeline.settings import Settings
from citeline.store import catalog
from citeline.store.catalog import ChunkRow, DocumentInfo, Labels, VersionSpec
from citeline.store.chroma import UNIVERSAL, WHOLE, ChromaIndex, client_spec, collection_name
from citeline.store.database import schema_name
from citeline.store.index import VectorQuery, VersionVectors
from tests.conftest import free_port, write
from tests.test_annotate import MANUAL

TOPICS = {
    "bees.txt": "Honey bees communicate the direction of flowers to the hive with a waggle dance.",
    "volcano.txt": "Basaltic lava flows from shield volcanoes cool into columnar joints of rock.",
    "tax.txt": "The income tax return is due in April; late filing adds a penalty and interest.",
}


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Chroma server (the ``chroma run`` of the chromadb package) on a free loopback port."""
    port = free_port()
    folder = tmp_path_factory.mktemp("chroma-server")
    exe = Path(sys.executable).with_name("chroma")
    proc = subprocess.Popen(
        [str(exe), "run", "--path", str(folder), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{url}/api/v2/heartbeat", timeout=2):
                break
        except OSError:
            assert proc.poll() is None, "chroma run exited"
            assert time.monotonic() < deadline, "chroma run did not start"
            time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(20)


BACKENDS = ("pgvector", "chroma-embedded", "chroma-server")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, settings: Settings) -> Settings:
    """The test's settings with one vector backend."""
    if request.param == "pgvector":
        return settings
    if request.param == "chroma-embedded":
        return settings.model_copy(update={"vector_backend": "chroma"})
    url = request.getfixturevalue("chroma_server")
    return settings.model_copy(update={"vector_backend": "chroma", "chroma_url": url})


@pytest.fixture
def store(backend: Settings) -> Iterator[Citeline]:
    with Citeline(backend) as instance:
        yield instance
        with instance.engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema_name(backend.namespace)}" CASCADE'))
        index = instance.vector_index
        if isinstance(index, ChromaIndex):
            for collection in index.client.list_collections():
                if collection.name.startswith(f"citeline_{backend.namespace}_"):
                    index.client.delete_collection(collection.name)


def _ingest(cl: Citeline, folder: Path, texts: dict[str, str], **labels: object) -> None:
    results = cl.ingest(
        [write(folder / name, text) for name, text in texts.items()],
        IngestOptions(**labels),  # type: ignore[arg-type]
    )
    assert all(r.error is None for r in results), [r.error for r in results]


def _names(cl: Citeline, query: str, **request: object) -> list[str]:
    return [h.document_name for h in cl.search(SearchRequest(query, **request))]  # type: ignore[arg-type]


def _document(cl: Citeline, name: str) -> DocumentInfo:
    return next(d for d in cl.documents() if d.name == name and d.is_active)


def _chunk_ids(cl: Citeline, name: str) -> list[int]:
    return [int(c["id"]) for c in cl.chunks(_document(cl, name))]


class TestVectorIndex:
    def test_added_vectors_are_searched_and_read_back_by_chunk_id(
        self, store: Citeline, tmp_path: Path
    ) -> None:
        _ingest(store, tmp_path, TOPICS)
        assert _names(store, "how do bees tell each other where flowers are", top_k=1) == ["bees.txt"]
        assert _names(store, "lava and volcanic rock", top_k=1) == ["volcano.txt"]
        ids = _chunk_ids(store, "tax.txt")
        query = store.embedder.embed([TOPICS["tax.txt"]])[0]
        with store.engine.connect() as conn:
            vectors = store.vector_index.vectors(conn, ids)
            nearest = store.vector_index.search(
                conn, VectorQuery(query, store.embedder.model_id, Filters(), None, 1)
            )
        assert set(vectors) == set(ids)
        assert float(np.dot(vectors[ids[0]], query)) == pytest.approx(1.0, abs=1e-4)
        assert nearest[0][0] == ids[0] and nearest[0][1] == pytest.approx(0.0, abs=1e-4)

    def test_a_text_already_embedded_takes_its_vector_from_the_index(
        self, store: Citeline, tmp_path: Path
    ) -> None:
        [first] = store.ingest([write(tmp_path / "one.txt", TOPICS["bees.txt"])])
        [again] = store.ingest([write(tmp_path / "two.txt", TOPICS["bees.txt"])])
        assert (first.embedded, again.chunks, again.embedded) == (1, 1, 0)
        # Both documents are found: the passage is one hit that names its other copy.
        [hit] = store.search(SearchRequest("bees"))
        assert sorted([hit.document_name, *(c.document_name for c in hit.also_in)]) == ["one.txt", "two.txt"]

    def test_a_tables_later_chunks_are_embedded_and_indexed_under_its_header_row(
        self, store: Citeline, tmp_path: Path
    ) -> None:
        """Rows after a table's first chunk are cells under no names; each such chunk is embedded and
        indexed with the table's header row before it (types.embedding_text), keeps its own text, and
        gets the same vector again when the index lost it and repair restores it."""
        header = "| Fastener | Tightening torque | Where |"
        rows = "\n".join(
            f"| M{i} | {i * 5} N·m | the bracket of part {i} on the housing |" for i in range(40)
        )
        path = write(tmp_path / "torques.md", f"# Torques\n\n{header}\n| --- | --- | --- |\n{rows}\n")
        [result] = store.ingest([path], IngestOptions(chunk_size=300, chunk_overlap=50))
        doc = _document(store, "torques.md")
        chunks = store.chunks(doc)
        later = [c for c in chunks if c["context"] is not None]
        assert len(later) == len(chunks) - 1 and all(c["context"] == header for c in later)
        assert all(header not in c["text"] for c in later)
        expected = store.embedder.embed([f"{header}\n{c['text']}" for c in later])
        ids = [int(c["id"]) for c in later]

        def cosines() -> list[float]:
            with store.engine.connect() as conn:
                held = store.vector_index.vectors(conn, ids)
            return [float(np.dot(held[i], e)) for i, e in zip(ids, expected, strict=True)]

        assert min(cosines()) == pytest.approx(1.0, abs=1e-4)
        # The header's words reach the rows by keyword too: only the header says "tightening".
        hits = {h.chunk_id: h for h in store.search(SearchRequest("tightening", top_k=50))}
        assert all(hits[i].keyword_score > 0 and hits[i].context == header for i in ids)
        with store.engine.connect() as conn:
            store.vector_index.remove(conn, [doc.version_id])
        store.repair_vectors()
        assert min(cosines()) == pytest.approx(1.0, abs=1e-4)
        # The same rows in a file of their own, under no header, are another text with another vector:
        # the vector reused for a text already embedded is the one of what was embedded.
        alone = write(tmp_path / "rows.md", later[0]["text"])
        [again] = store.ingest([alone])
        assert again.embedded == 1 and result.error is None
        [row] = store.chunks(_document(store, "rows.md"))
        with store.engine.connect() as conn:
            vector = store.vector_index.vectors(conn, [int(row["id"])])[int(row["id"])]
        assert row["context"] is None
        assert float(np.dot(vector, store.embedder.embed([row["text"]])[0])) == pytest.approx(1.0, abs=1e-4)

    def test_vectors_of_a_version_being_built_neither_show_nor_crowd_out_active_ones(
        self, store: Citeline, tmp_path: Path
    ) -> None:
        _ingest(store, tmp_path, {"tax.txt": TOPICS["tax.txt"]})
        model = store.embedder.model_id
        texts = [f"{TOPICS['bees.txt']} Draft {i}." for i in range(12)]
        rows = [ChunkRow(i, t, 1, 0, len(t), None, {"bee": 1}, 1) for i, t in enumerate(texts)]
        spec = VersionSpec(uuid.uuid4().hex, model, 800, 120, store.vector_index.name)
        with store.engine.begin() as conn:
            doc, _ = catalog.begin_version(
                conn, source_uri="test://draft", name="draft", spec=spec, labels=Labels()
            )
            stored = catalog.insert_chunks(
                conn, model, [catalog.ChunkGroup(doc, rows, store.embedder.embed(texts))],
                inline_vectors=store.vector_index.in_rows,
            )  # fmt: skip
        with store.engine.begin() as conn:
            store.vector_index.add(conn, model, stored)
        query = store.embedder.embed([TOPICS["bees.txt"]])[0]
        with store.engine.connect() as conn:
            found = store.vector_index.search(conn, VectorQuery(query, model, Filters(), None, 1))
        assert [cid for cid, _ in found] == _chunk_ids(store, "tax.txt")
        assert _names(store, TOPICS["bees.txt"]) == ["tax.txt"]

    def test_scope_filters_keep_universal_documents_and_nothing_of_other_scopes(
        self, store: Citeline, tmp_path: Path
    ) -> None:
        _ingest(store, tmp_path / "a", {"bees-a.txt": TOPICS["bees.txt"]}, scopes=("a",))
        _ingest(store, tmp_path / "b", {"bees-b.txt": TOPICS["bees.txt"] + " Scope b."}, scopes=("b",))
        _ingest(store, tmp_path / "u", {"bees-all.txt": TOPICS["bees.txt"] + " For everyone."})
        query = "bees dance"
        assert sorted(_names(store, query, filters=Filters(scopes=("a",)))) == ["bees-a.txt", "bees-all.txt"]
        assert _names(store, query, filters=Filters(scopes=())) == ["bees-all.txt"]
        assert sorted(_names(store, query)) == ["bees-a.txt", "bees-all.txt", "bees-b.txt"]

    def test_other_filters_apply_inside_the_index(self, store: Citeline, tmp_path: Path) -> None:
        _ingest(store, tmp_path / "x", {"bees.txt": TOPICS["bees.txt"]}, category="nature/insects")
        _ingest(store, tmp_path / "y", {"tax.txt": TOPICS["tax.txt"]}, category="money", tags=("forms",))
        assert _names(store, "bees", filters=Filters(category="nature")) == ["bees.txt"]
        assert _names(store, "bees", filters=Filters(tags_any=("forms",))) == ["tax.txt"]

    def test_chunk_level_filters_keep_only_the_chunks_that_pass_them(
        self, store: Citeline, tmp_path: Path
    ) -> None:
        # One section a chunk; notes that answer the query better but have no section type.
        options = IngestOptions(chunk_size=200, chunk_overlap=0)
        store.ingest([write(tmp_path / "xr200.md", MANUAL)], options)
        query = "the unit does not start, what should I check?"
        _ingest(store, tmp_path / "notes", {f"note-{i}.txt": f"Note {i}: {query}" for i in range(8)})
        assert all(n.startswith("note-") for n in _names(store, query, top_k=3))
        hits = store.search(SearchRequest(query, Filters(section_types=("troubleshooting",)), top_k=3))
        assert hits and all(h.section_type == "troubleshooting" for h in hits)
        # Every hit, keyword-only ones included, has its distance from wherever its vector lives.
        assert all(0.0 <= h.distance < 1.0 for h in hits)
        assert store.search(SearchRequest(query, Filters(model_numbers=("ZZ-999",)))) == []

    @pytest.mark.parametrize("exact_below", [0, 2_000], ids=["walk", "narrow"])
    def test_a_scope_is_isolated_at_top_k_1(self, store: Citeline, tmp_path: Path, exact_below: int) -> None:
        """Forty near-copies of the query in scope b cannot crowd out the one, farther, chunk of scope a,
        whether the backend walks its index or reads the few in-scope vectors."""
        cl = store.derive(exact_search_below=exact_below)
        try:
            near = {f"b{i:02}.txt": f"{TOPICS['volcano.txt']} Sample {i}." for i in range(40)}
            _ingest(cl, tmp_path / "b", near, scopes=("b",))
            _ingest(cl, tmp_path / "a", {"a.txt": TOPICS["tax.txt"]}, scopes=("a",))
            request = {"filters": Filters(scopes=("a",)), "top_k": 1, "candidates": 1}
            assert _names(cl, TOPICS["volcano.txt"], **request) == ["a.txt"]
            vector = cl.embedder.embed([TOPICS["volcano.txt"]])[0]
            with cl.engine.connect() as conn:
                from citeline.retrieve.search import read_catalog

                scope = read_catalog(
                    conn, cl.embedder.model_id, Filters(scopes=("a",)), vector_index=cl.vector_index.name
                ).scope
                found = cl.vector_index.search(
                    conn, VectorQuery(vector, cl.embedder.model_id, Filters(scopes=("a",)), scope, 1)
                )
            assert [cid for cid, _ in found] == _chunk_ids(cl, "a.txt")
        finally:
            cl.close()

    def test_a_relabelled_document_is_found_under_its_new_scopes_only(
        self, store: Citeline, tmp_path: Path
    ) -> None:
        _ingest(store, tmp_path, {"bees.txt": TOPICS["bees.txt"]}, scopes=("a",))
        _ingest(store, tmp_path / "u", {"tax.txt": TOPICS["tax.txt"]})
        store.relabel(_document(store, "bees.txt").id, IngestOptions(scopes=("b",)))
        assert _names(store, "bees", filters=Filters(scopes=("a",))) == ["tax.txt"]
        assert _names(store, "bees", filters=Filters(scopes=("b",)), top_k=1) == ["bees.txt"]
        # Ingesting the unchanged file with other scopes relabels it too.
        _ingest(store, tmp_path, {"bees.txt": TOPICS["bees.txt"]}, scopes=("c",))
        assert _names(store, "bees", filters=Filters(scopes=("c",)), top_k=1) == ["bees.txt"]
        assert _names(store, "bees", filters=Filters(scopes=("b",))) == ["tax.txt"]

    def test_a_new_version_replaces_the_old_ones_vectors(self, store: Citeline, tmp_path: Path) -> None:
        path = write(tmp_path / "note.txt", TOPICS["bees.txt"])
        store.ingest([path])
        old = _chunk_ids(store, "note.txt")
        path.write_text(TOPICS["volcano.txt"], encoding="utf-8")
        store.ingest([path])
        new = _chunk_ids(store, "note.txt")
        assert set(old).isdisjoint(new)
        hits = store.search(SearchRequest(TOPICS["bees.txt"], top_k=5))
        assert [h.chunk_id for h in hits] == new
        assert hits[0].text == TOPICS["volcano.txt"]
        with store.engine.connect() as conn:
            assert store.vector_index.vectors(conn, old) == {}

    def test_deleting_a_document_removes_its_vectors(self, store: Citeline, tmp_path: Path) -> None:
        _ingest(store, tmp_path, TOPICS)
        ids = _chunk_ids(store, "bees.txt")
        store.delete(str(_document(store, "bees.txt").id))
        assert "bees.txt" not in _names(store, TOPICS["bees.txt"])
        with store.engine.connect() as conn:
            assert store.vector_index.vectors(conn, ids) == {}

    def test_start_up_repairs_a_crash_between_the_catalog_and_the_index(
        self, store: Citeline, tmp_path: Path
    ) -> None:
        """A crash after a version's vectors were written but before its swap-in (start-up then deletes its
        chunks), or between a delete's commit and the index's removal, leaves vectors without chunks; an
        index that lost writes leaves active chunks without vectors. Warming up removes the first and
        restores the second."""
        _ingest(store, tmp_path, TOPICS)
        lost = _chunk_ids(store, "volcano.txt")
        volcano = _document(store, "volcano.txt")
        ghost = [10**12 + i for i in range(3)]
        model = store.embedder.model_id
        with store.engine.connect() as conn:
            store.vector_index.add(
                conn, model, [VersionVectors(uuid.uuid4(), ghost, store.embedder.embed(["a", "b", "c"]))]
            )
            store.vector_index.remove(conn, [volcano.version_id])
        store.warm_up()
        with store.engine.connect() as conn:
            assert store.vector_index.vectors(conn, ghost) == {}
            assert set(store.vector_index.vectors(conn, lost)) == set(lost)
        assert _names(store, "lava and volcanic rock", top_k=1) == ["volcano.txt"]
        report = store.repair_vectors()
        assert (report.removed, report.restored) == (0, 0)

    def test_a_search_refuses_vectors_another_backend_holds(self, store: Citeline, tmp_path: Path) -> None:
        _ingest(store, tmp_path, {"bees.txt": TOPICS["bees.txt"]})
        other = "pgvector" if store.settings.vector_backend == "chroma" else "chroma"
        with (
            store.derive(vector_backend=other) as switched,
            pytest.raises(ModelMismatchError, match="reingest"),
        ):
            switched.search("bees")


def test_ingesting_again_under_chroma_moves_documents_without_embedding_them(
    cl: Citeline, tmp_path: Path
) -> None:
    path = write(tmp_path / "bees.txt", TOPICS["bees.txt"])
    cl.ingest([path])
    with cl.derive(vector_backend="chroma") as moved:
        [result] = moved.ingest([path])
        assert (result.outcome.value, result.embedded) == ("updated", 0)
        assert result.document is not None and result.document.vector_index == "chroma"
        assert [h.document_name for h in moved.search("bees")] == ["bees.txt"]
    with pytest.raises(ModelMismatchError, match=r"\(chroma\)"):
        cl.search("bees")


def test_a_search_refuses_vectors_of_another_model(cl: Citeline, tmp_path: Path) -> None:
    cl.ingest([write(tmp_path / "bees.txt", TOPICS["bees.txt"])])
    with cl.engine.begin() as conn:
        conn.execute(sa.text("UPDATE documents SET embedding_model = 'onnx:another-model'"))
    with pytest.raises(ModelMismatchError, match="another-model"):
        cl.search("bees")


# -- Chroma's clients, as configured ------------------------------------------------------------------


def test_chroma_is_embedded_in_the_data_directory_by_default(settings: Settings) -> None:
    spec = client_spec(settings.model_copy(update={"vector_backend": "chroma"}))
    assert spec.kind == "embedded"
    assert spec.path == settings.data_dir.resolve() / "chroma"


def test_chroma_url_selects_a_server(settings: Settings) -> None:
    spec = client_spec(settings.model_copy(update={"chroma_url": "https://chroma.example.org"}))
    assert (spec.kind, spec.host, spec.port, spec.ssl) == ("server", "chroma.example.org", 443, True)
    spec = client_spec(settings.model_copy(update={"chroma_url": "http://10.0.0.5:9000"}))
    assert (spec.kind, spec.host, spec.port, spec.ssl) == ("server", "10.0.0.5", 9000, False)


def test_chroma_cloud_reads_the_chroma_environment_and_never_shows_the_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CHROMA_API_KEY", "ck-secret-123")
    monkeypatch.setenv("CHROMA_TENANT", "clinic-tenant")
    monkeypatch.setenv("CHROMA_DATABASE", "records")
    monkeypatch.setenv("CITELINE_VECTOR_BACKEND", "chroma")
    settings = Settings(data_dir=tmp_path)
    spec = client_spec(settings)
    assert (spec.kind, spec.tenant, spec.database) == ("cloud", "clinic-tenant", "records")
    assert spec.api_key is not None and spec.api_key.get_secret_value() == "ck-secret-123"
    assert "ck-secret-123" not in repr(spec) and "ck-secret-123" not in repr(settings)


def test_each_namespace_and_model_has_its_own_collection() -> None:
    names = {
        collection_name("default", "onnx:all-MiniLM-L6-v2"),
        collection_name("default", "openai:text-embedding-3-small"),
        collection_name("other", "onnx:all-MiniLM-L6-v2"),
    }
    assert len(names) == 3


def test_a_vector_missing_from_one_of_its_two_chroma_collections_is_copied_back(
    settings: Settings, tmp_path: Path
) -> None:
    """Chroma holds each vector in its model's whole collection (unscoped searches) and in its scope
    partition (scoped ones): a repair copies one that either lost back from the other, embedding nothing."""
    with Citeline(settings.model_copy(update={"vector_backend": "chroma"})) as cl:
        _ingest(cl, tmp_path, {"bees.txt": TOPICS["bees.txt"]}, scopes=("a",))
        _ingest(cl, tmp_path / "u", {"volcano.txt": TOPICS["volcano.txt"], "tax.txt": TOPICS["tax.txt"]})
        index = cl.vector_index
        assert isinstance(index, ChromaIndex)
        model = cl.embedder.model_id
        whole = index.client.get_collection(collection_name(settings.namespace, model, WHOLE))
        universal = index.client.get_collection(collection_name(settings.namespace, model, UNIVERSAL))
        bees, volcano = _chunk_ids(cl, "bees.txt"), _chunk_ids(cl, "volcano.txt")
        whole.delete(ids=[str(i) for i in bees])
        universal.delete(ids=[str(i) for i in volcano])

        def nearest(text: str, filters: Filters) -> int:
            vector = cl.embedder.embed([text])[0]
            with cl.engine.connect() as conn:
                scope = read_catalog(conn, model, filters, vector_index=index.name).scope
                return index.search(conn, VectorQuery(vector, model, filters, scope, 1))[0][0]

        assert nearest(TOPICS["bees.txt"], Filters()) not in bees
        assert nearest(TOPICS["volcano.txt"], Filters(scopes=())) not in volcano
        report = cl.repair_vectors()
        assert (report.removed, report.restored, report.unrestorable) == (0, len(bees) + len(volcano), 0)
        assert nearest(TOPICS["bees.txt"], Filters()) in bees
        assert nearest(TOPICS["volcano.txt"], Filters(scopes=())) in volcano
        assert cl.repair_vectors().restored == 0
        for collection in index.client.list_collections():
            if collection.name.startswith(f"citeline_{settings.namespace}_"):
                index.client.delete_collection(collection.name)
        with cl.engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema_name(settings.namespace)}" CASCADE'))
