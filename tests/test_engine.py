"""One Citeline per process: fixed settings, parts created once, warm-up, derived instances."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from citeline.access import Access
from citeline.engine import Citeline, namespaces
from citeline.errors import AccessDeniedError, ClosedError, ConfigError, InvalidRequestError, NotFoundError
from citeline.ingest import IngestOptions
from citeline.settings import Fusion, Settings
from citeline.store.database import schema_name
from citeline.store.keyword import MemoryKeywordIndex
from tests.conftest import write


def test_settings_cannot_be_changed_on_a_live_instance(cl: Citeline) -> None:
    with pytest.raises(AttributeError):
        cl.settings = cl.settings.model_copy(update={"top_k": 3})  # type: ignore[misc]


def test_concurrent_first_requests_create_each_part_once(settings: Settings) -> None:
    with Citeline(settings) as cl:
        barrier = threading.Barrier(6)
        seen: list[tuple[object, object]] = []

        def first_request() -> None:
            barrier.wait()
            seen.append((cl.embedder, cl.engine))

        threads = [threading.Thread(target=first_request) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len({id(e) for e, _ in seen}) == 1
        assert len({id(g) for _, g in seen}) == 1


def test_warm_up_loads_the_keyword_index_before_the_first_search(cl: Citeline, tmp_path: Path) -> None:
    cl.ingest([write(tmp_path / "a.txt", "Prime the pump before first use.")])
    with Citeline(cl.settings) as server:
        index = server.keyword_index
        assert isinstance(index, MemoryKeywordIndex) and not index._loaded
        server.warm_up()
        assert index._loaded and server._embedder is not None


def test_a_derived_instance_shares_the_open_store_and_closes_without_closing_it(
    cl: Citeline, tmp_path: Path
) -> None:
    cl.ingest([write(tmp_path / "a.txt", "Prime the pump before first use.")])
    with cl.derive(fusion=Fusion.RECIPROCAL_RANK, top_k=1) as rrf:
        assert rrf.settings.fusion is Fusion.RECIPROCAL_RANK and cl.settings.fusion is Fusion.DISTRIBUTION
        assert rrf.engine is cl.engine and rrf.embedder is cl.embedder
        assert rrf.keyword_index is cl.keyword_index
        assert len(rrf.search("prime the pump")) == 1
    # The parent's store is still open after the derived instance closed.
    assert cl.search("prime the pump")[0].document_name == "a.txt"
    with cl.derive(namespace="elsewhere") as other:
        assert other.keyword_index is not cl.keyword_index


def test_an_empty_or_wildcard_document_id_names_no_document(cl: Citeline, tmp_path: Path) -> None:
    # With one document in the namespace, '' (a prefix of every id) or '%' once named it: `docs delete ''`
    # deleted it.
    cl.ingest([write(tmp_path / "valves.md", "# Valves\n\nOpens at 6 bar.")])
    (only,) = cl.documents()
    for ref in ("", "   "):
        with pytest.raises(InvalidRequestError, match=r"a document id .* is needed, got an empty one"):
            cl.delete(ref)
    for ref in ("%", "_", "%%", "zz", "%-"):
        with pytest.raises(NotFoundError, match="no document with id"):
            cl.delete(ref)
    assert [d.id for d in cl.documents()] == [only.id]
    assert cl.document(str(only.id)[:6]).id == only.id


def test_stats_count_each_document_once_by_its_current_version(cl: Citeline, tmp_path: Path) -> None:
    # Counted per version, a document whose new version failed (and still served the old one) was two
    # documents: the admin page's "Documents" read one more than its list of documents.
    path = write(tmp_path / "valves.md", "# Valves\n\nThe relief valve opens at 6 bar.")
    cl.ingest([path])
    write(path, "")
    [failed] = cl.ingest([path])
    assert failed.error is not None
    cl.ingest([write(tmp_path / "pumps.md", "# Pumps\n\nPrime the pump before first use.")])

    stats = cl.stats()

    assert (stats["documents"], stats["active_documents"], stats["versions"]) == (2, 2, 3)
    assert stats["by_status"] == {"completed": 2}


def test_a_reader_given_a_folder_that_holds_no_store_refuses_it_and_makes_none(tmp_path: Path) -> None:
    # A mistyped --data-dir started a new, empty database there and answered from it.
    typo = tmp_path / "citline-data"
    for namespace in ("default", "trials"):
        with (
            Citeline(Settings(data_dir=typo, namespace=namespace, database_url=None), create=False) as reader,
            pytest.raises(NotFoundError) as refused,
        ):
            reader.documents()
        assert str(refused.value).startswith(
            f"no namespace {namespace!r}: there is no citeline store in {typo} yet. Check the folder given"
        )
        assert not (typo / "pg").exists()


def test_the_default_namespace_is_read_rather_than_refused_when_the_database_lacks_it(
    settings: Settings,
) -> None:
    # Nobody types "default" by mistake: on a fresh install, listing documents finds none.
    default = settings.model_copy(update={"namespace": "default"})
    existed = "default" in namespaces(default)
    with Citeline(default, create=False) as reader:
        try:
            documents = reader.documents()
            assert existed or documents == []
        finally:
            if not existed:
                with reader.engine.begin() as conn:
                    conn.execute(sa.text(f'DROP SCHEMA "{schema_name("default")}" CASCADE'))


def test_an_instance_that_may_not_create_its_namespace_refuses_one_the_database_lacks(
    cl: Citeline, tmp_path: Path
) -> None:
    # A reader opening a mistyped namespace made it, empty, and answered from it.
    cl.ingest([write(tmp_path / "valves.md", "# Valves\n\nOpens at 6 bar.")])
    typo = cl.settings.model_copy(update={"namespace": cl.settings.namespace + "x"})
    for reader in (Citeline(typo, create=False), Citeline(cl.settings, create=False).derive(typo)):
        with reader, pytest.raises(NotFoundError) as refused:
            reader.documents()
        message = str(refused.value)
        assert message.startswith(f"no namespace {typo.namespace!r} in the embedded database in ")
        assert f"namespaces: {', '.join(namespaces(cl.settings))}. " in message
        assert cl.settings.namespace in namespaces(cl.settings)
        assert typo.namespace not in namespaces(cl.settings)
    with Citeline(cl.settings, create=False) as reader:
        assert [d.name for d in reader.documents()] == ["valves.md"]
    # By default opening makes the namespace: what ingesting into a new one needs.
    with Citeline(typo) as writer:
        try:
            assert writer.documents() == [] and typo.namespace in namespaces(cl.settings)
        finally:
            with writer.engine.begin() as conn:
                conn.execute(sa.text(f'DROP SCHEMA "{schema_name(typo.namespace)}" CASCADE'))


def test_ingest_records_who_sent_each_version_as_an_upload_does(cl: Citeline, tmp_path: Path) -> None:
    # A library script owns its store: its versions are the local user's, unless it names an uploader.
    cl.ingest([write(tmp_path / "a.md", "# Pump\n\nPrime the pump before first use.")])
    cl.ingest([write(tmp_path / "b.md", "# Hose\n\nThe hose is 8 m.")], IngestOptions(uploaded_by="ana"))
    cl.ingest(
        [write(tmp_path / "c.md", "# Valve\n\nThe valve opens at 9.5 bar.")], access=Access.admin("ops")
    )
    assert {doc.name: doc.uploaded_by for doc in cl.documents()} == {
        "a.md": "local",
        "b.md": "ana",
        "c.md": "ops",
    }


def test_a_reader_cannot_ingest(cl: Citeline, tmp_path: Path) -> None:
    # Said without API keys: a program's Access.reader has none (the API words its own refusal for keys).
    with pytest.raises(
        AccessDeniedError, match=re.escape("ingest documents: needs admin access (this access is a reader's)")
    ):
        cl.ingest([write(tmp_path / "a.md", "# Pump\n\nPrime it.")], access=Access.reader(None))
    assert cl.documents() == []


def test_one_path_given_as_a_string_or_path_is_one_source(
    cl: Citeline, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A str is itself an iterable of str: ingest("one") was the sources "o", "n", "e", and an absolute
    # "/tmp/..." began with "/", a folder, so the whole file system was walked.
    write(tmp_path / "one" / "a.md", "# Pump\n\nPrime the pump before first use.")
    write(tmp_path / "b.md", "# Hose\n\nThe hose is 8 m.")
    monkeypatch.chdir(tmp_path)
    assert [r.source for r in cl.ingest("one")] == [str(Path("one") / "a.md")]
    assert [r.source for r in cl.ingest(str(tmp_path / "one"))] == [str(tmp_path / "one" / "a.md")]
    assert [r.source for r in cl.ingest(tmp_path / "b.md")] == [str(tmp_path / "b.md")]
    assert sorted(doc.name for doc in cl.documents()) == ["a.md", "b.md"]


def test_one_document_id_given_as_a_string_is_one_id(cl: Citeline, tmp_path: Path) -> None:
    cl.ingest([write(tmp_path / "a.md", "# Pump\n\nPrime the pump before first use.")])
    doc = cl.documents()[0]
    assert cl.document_ids(str(doc.id)) == (doc.id,)
    assert cl.document_ids(str(doc.id)[:8]) == (doc.id,)
    assert [d.id for d in cl.reingest_candidates(document_ids=str(doc.id)[:8])] == [doc.id]
    assert [d.id for d in cl.refresh_candidates(document_ids=str(doc.id)[:8])] == [doc.id]


def test_a_closed_instance_refuses_use_and_opens_nothing_again(cl: Citeline, tmp_path: Path) -> None:
    cl.ingest([write(tmp_path / "a.txt", "Prime the pump before first use.")])
    searcher = cl.derive(top_k=1)
    assert searcher.search("prime the pump")[0].document_name == "a.txt"
    searcher.close()
    searcher.close()  # closing twice is closing once
    for use in (lambda: searcher.search("pump"), searcher.documents, searcher.derive, searcher.__enter__):
        with pytest.raises(ClosedError, match=r"^this Citeline is closed"):
            use()
    # Nothing was opened again to answer (a search after close reopened the engine and thread pools).
    assert (searcher._engine, searcher._query_pool, searcher._keyword_pool) == (None, None, None)
    assert cl.search("prime the pump")[0].document_name == "a.txt"  # the parent it borrowed from is open


def test_searches_in_flight_when_it_closes_finish_or_are_told_it_is_closed(
    cl: Citeline, tmp_path: Path
) -> None:
    cl.ingest([write(tmp_path / "a.txt", "Prime the pump before first use.")])
    searcher = cl.derive(query_cache_size=0)  # every search embeds its query on the query pool
    searcher.search("warm up")
    errors: list[BaseException] = []
    done = [0]
    stop = threading.Event()

    def search(i: int) -> None:
        n = 0
        while not stop.is_set():
            try:
                searcher.search(f"pump {i} {n}")
                done[0] += 1
            except BaseException as exc:
                errors.append(exc)
                if isinstance(exc, ClosedError):
                    return
            n += 1

    threads = [threading.Thread(target=search, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    searcher.close()
    time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join()
    assert done[0] > 0
    assert [type(e) for e in errors] == [ClosedError] * 4, errors[:3]
    assert (searcher._engine, searcher._query_pool, searcher._keyword_pool) == (None, None, None)


def test_a_derived_instance_validates_its_settings_as_loading_them_does(cl: Citeline) -> None:
    # derive() copied the settings unchecked: top_k="ten" failed the first search with a TypeError,
    # namespace="Bad Name" as the database's error, and top_kk=3 was ignored.
    with pytest.raises(
        ConfigError, match=r"^invalid setting: CITELINE_TOP_K: Input should be a valid integer"
    ):
        cl.derive(top_k="ten")
    with pytest.raises(
        ConfigError, match=r"^invalid setting: CITELINE_NAMESPACE: Value error, namespace 'Bad Name'"
    ):
        cl.derive(namespace="Bad Name")
    with pytest.raises(ConfigError, match=r"^unknown setting 'top_kk' \(did you mean 'top_k'\?\)"):
        cl.derive(top_kk=3)
    with cl.derive(top_k=3) as three:
        assert three.settings.top_k == 3 and three.settings.namespace == cl.settings.namespace
