"""A Chroma server that is down is an error (StoreError: 503 ``store``, exit 69), never an empty index:
only a collection Chroma says does not exist means "no vectors yet". Each test starts its own real
``chroma run`` so that it can stop it."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from pydantic import SecretStr
from typer.testing import CliRunner

from citeline.cli import app
from citeline.engine import Citeline
from citeline.errors import StoreError
from citeline.ingest import Outcome, RetryPolicy
from citeline.jobs.submit import Upload
from citeline.retrieve.search import SearchRequest
from citeline.settings import Settings
from citeline.store.chroma import HEARTBEAT_TTL, ChromaIndex, ClientSpec
from citeline.store.database import schema_name
from tests.conftest import free_port, write

runner = CliRunner()


class ChromaServer:
    """A ``chroma run`` on loopback that a test may stop and start again (same port, same files)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.url = f"http://127.0.0.1:{free_port()}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        exe = Path(sys.executable).with_name("chroma")
        host, port = self.url.split("//")[1].split(":")
        self.proc = subprocess.Popen(
            [str(exe), "run", "--path", str(self.folder), "--host", host, "--port", port],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/api/v2/heartbeat", timeout=2):
                    return
            except OSError:
                assert self.proc.poll() is None, "chroma run exited"
                assert time.monotonic() < deadline, "chroma run did not start"
                time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(20)


@pytest.fixture
def chroma_server(tmp_path: Path) -> Iterator[ChromaServer]:
    server = ChromaServer(tmp_path / "chroma")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def chroma(settings: Settings, chroma_server: ChromaServer) -> Iterator[Settings]:
    """Settings of a Chroma deployment; the namespace is dropped afterwards."""
    settings = settings.model_copy(update={"vector_backend": "chroma", "chroma_url": chroma_server.url})
    yield settings
    with Citeline(settings) as cl, cl.engine.begin() as conn:
        conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema_name(settings.namespace)}" CASCADE'))


def _ingest(settings: Settings, folder: Path) -> None:
    with Citeline(settings) as cl:
        [result] = cl.ingest([write(folder / "bees.txt", "Honey bees dance to show where flowers are.")])
        assert result.error is None


class TestChromaDown:
    def test_a_collection_not_made_yet_means_no_hits(self, chroma: Settings) -> None:
        with Citeline(chroma) as cl:
            assert cl.search(SearchRequest("bees")) == []

    def test_a_process_that_never_reached_chroma_fails_instead_of_finding_nothing(
        self, chroma: Settings, chroma_server: ChromaServer, tmp_path: Path
    ) -> None:
        _ingest(chroma, tmp_path)
        chroma_server.stop()
        # A fresh process (another worker, a restarted server) has opened no collection yet.
        with Citeline(chroma) as cl, pytest.raises(StoreError, match="unreachable"):
            cl.search(SearchRequest("where are the flowers"))

    def test_a_connected_process_that_has_not_opened_the_collection_fails_too(
        self, chroma: Settings, chroma_server: ChromaServer, tmp_path: Path
    ) -> None:
        _ingest(chroma, tmp_path)
        with Citeline(chroma) as cl:
            index = cl.vector_index
            assert isinstance(index, ChromaIndex)
            assert index.client.heartbeat()
            chroma_server.stop()
            with pytest.raises(StoreError, match="unreachable"):
                cl.search(SearchRequest("where are the flowers"))

    def test_a_build_whose_vectors_could_not_be_written_records_why_not_the_cleanup(
        self, chroma: Settings, chroma_server: ChromaServer, caplog: pytest.LogCaptureFixture
    ) -> None:
        def submit(name: str, text: str) -> uuid.UUID:
            return cl.submit(Upload(name, io.BytesIO(text.encode()))).document.version_id

        with Citeline(chroma) as cl:
            ingestor = cl.ingestor()
            # A worker that has built before: its collections are open, its client connected.
            ingestor.run_jobs(limit=1, version_ids=[submit("bees.txt", "Honey bees dance.")])
            pump = submit("pump.txt", "Drain the pump before winter storage.")
            chroma_server.stop()
            [result] = ingestor.run_jobs(limit=1, version_ids=[pump], retry=RetryPolicy(retries=0))
        assert result.error is not None
        assert "is unreachable: failed to add 1 vector: " in result.error
        assert "remove" not in result.error
        assert result.error.endswith("(gave up after 1 attempt)")
        # The cleanup that could not run either is logged, for the start-up repair to finish.
        assert "failed to remove the vectors of 1 version: " in caplog.text

    def test_a_first_build_that_finds_chroma_down_goes_back_to_the_queue(
        self, chroma: Settings, chroma_server: ChromaServer
    ) -> None:
        """A worker started while Chroma is down fails in preparing the model's collections, before any
        vector is written: that is as passing as a failed write, so the version is retried, not left
        processing by a run that raised."""
        retry = RetryPolicy(retries=1, delay=0)
        with Citeline(chroma) as cl:
            pump = cl.submit(Upload("pump.txt", io.BytesIO(b"Drain the pump before winter."))).document
            chroma_server.stop()
            [result] = cl.ingestor().run_jobs(limit=1, version_ids=[pump.version_id], retry=retry)
            assert result.outcome is Outcome.RETRYING
            where = chroma_server.url.split("//")[1]
            assert result.error and result.error.startswith(f"Chroma (server, {where}) is unreachable: ")
            queued = cl.document(str(pump.id))
            assert (queued.status, queued.attempts) == ("queued", 1)
            assert queued.error and queued.error.endswith("(retrying in 0 s)")
            chroma_server.start()
            [built] = cl.ingestor().run_jobs(limit=1, version_ids=[pump.version_id], retry=retry)
            assert built.outcome is Outcome.ADDED
            assert cl.document(str(pump.id)).status == "completed"

    def test_readiness_names_a_chroma_server_that_is_down(
        self, chroma: Settings, chroma_server: ChromaServer
    ) -> None:
        with Citeline(chroma) as cl:
            cl.warm_up()
            up = cl.readiness()
            assert up.checks["vector_index"] and up.ready
            chroma_server.stop()
            time.sleep(HEARTBEAT_TTL)  # the last answer is kept that long: probes cost one request
            down = cl.readiness()
        assert not down.ready and not down.checks["vector_index"]
        assert down.problems["vector_index"].startswith(f"Chroma at {chroma_server.url.split('//')[1]} ")


def _cli_ingest(settings: Settings, folder: Path) -> tuple[int, str]:
    """``citeline ingest FOLDER`` (the direct path, no jobs) on the Chroma deployment of ``settings``."""
    env = {"CITELINE_VECTOR_BACKEND": "chroma", "CITELINE_CHROMA_URL": settings.chroma_url or ""}
    args = ["--data-dir", str(settings.data_dir), "--namespace", settings.namespace, "ingest", str(folder)]
    result = runner.invoke(app, args, env=env)
    return result.exit_code, result.stderr


def test_a_cli_ingest_that_finds_chroma_down_fails_its_new_versions_and_a_rerun_ingests_them(
    chroma: Settings, chroma_server: ChromaServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Chroma down while ``citeline ingest`` prepares its collections (a process that has not opened
    them yet): the versions it began fail at once, naming the server and why, instead of staying
    ``processing`` until the next run calls them interrupted, and the command stops with exit code 69
    (unavailable); what was stored before stays, and so do the originals, so that the same command
    works once Chroma is back."""
    folder = tmp_path / "docs"
    write(folder / "bees.txt", "Honey bees dance to show where flowers are.")
    assert _cli_ingest(chroma, folder)[0] == 0
    write(folder / "bees.txt", "Honey bees dance to show the hive where the flowers are.")
    write(folder / "pump.txt", "Drain the pump before winter storage.")
    chroma_server.stop()

    code, err = _cli_ingest(chroma, folder)

    where = chroma_server.url.split("//")[1]
    assert code == 69, err  # Chroma is unavailable
    down = f"Chroma (server, {where}) is unreachable: "
    assert err.splitlines()[-1].startswith(f"error: {down}")
    # Nothing was written to Chroma, so nothing is left for a repair to remove.
    assert "until the next repair" not in caplog.text
    with Citeline(chroma) as cl:
        ids = {d.name: str(d.id) for d in cl.documents()}
        versions = {name: cl.versions(ref) for name, ref in ids.items()}
        statuses = {name: [(v.version, v.status) for v in vs] for name, vs in versions.items()}
        assert statuses == {
            "bees.txt": [(1, "completed"), (2, "failed")],
            "pump.txt": [(1, "failed")],
        }
        assert cl.document(ids["bees.txt"]).version == 1  # the active version is untouched
        failed = [vs[-1] for vs in versions.values()]
        assert all(v.error and v.error.startswith(down) for v in failed)
        assert all(v.file_path and Path(v.file_path).exists() for v in failed)  # kept for a re-run

    chroma_server.start()
    code, err = _cli_ingest(chroma, folder)
    assert code == 0, err
    assert "2 sources: 1 added, 1 updated" in err
    with Citeline(chroma) as cl:
        hits = cl.search(SearchRequest("drain the pump for winter"))
        assert hits[0].document_name == "pump.txt"
        assert cl.document(ids["bees.txt"]).version == 3


def test_readiness_names_an_embedded_chroma_whose_folder_is_gone(tmp_path: Path) -> None:
    """Embedded Chroma holds its database open: with its folder deleted it goes on writing to files no
    one will find again, so readiness must say so (after the same 2 s as a server's heartbeat)."""
    folder = tmp_path / "chroma"
    index = ChromaIndex(ClientSpec("embedded", path=folder), namespace="t", ef_search=40)
    try:
        assert index.client.heartbeat()
        assert index.problem() is None
        shutil.rmtree(folder)
        assert index.problem() is None  # the answer is kept: probes from several orchestrators cost one
        time.sleep(HEARTBEAT_TTL)
        assert index.problem() == f"embedded Chroma's folder {folder} is gone"
        folder.mkdir()  # an empty folder in its place: the database the client holds is still gone
        time.sleep(HEARTBEAT_TTL)
        assert index.problem() == f"embedded Chroma's database {folder / 'chroma.sqlite3'} is gone"
    finally:
        index.close()


#: Run in a process of its own that file permissions bind (see the test).
_UNREADABLE_FOLDER = """
import json, shutil, tempfile, time
from pathlib import Path
from citeline.store.chroma import HEARTBEAT_TTL, ChromaIndex, ClientSpec

folder = Path(tempfile.mkdtemp(prefix="citeline-chroma-")) / "chroma"
index = ChromaIndex(ClientSpec("embedded", path=folder), namespace="t", ef_search=40)
index.client.heartbeat()
found = [index.problem()]
folder.chmod(0)
time.sleep(HEARTBEAT_TTL)
found.append(index.problem())
folder.chmod(0o700)
shutil.rmtree(folder.parent)
print(json.dumps({"folder": str(folder), "found": found}))
"""


def test_readiness_names_an_embedded_chroma_whose_folder_cannot_be_used() -> None:
    """A real PersistentClient whose folder is then made unreadable (mode 000)."""
    command = [sys.executable, "-c", _UNREADABLE_FOLDER]
    if os.geteuid() == 0:
        # Root passes any permission check by its capabilities; without them, it is the folder's owner
        # like any other, and still reaches this interpreter under /root.
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root, and no setpriv (util-linux) to drop root's permission override")
        caps = "-dac_override,-dac_read_search"
        command = [setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}", *command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["found"] == [
        None,
        f"embedded Chroma's folder {report['folder']} cannot be written: Permission denied",
    ]


def test_readiness_names_a_chroma_cloud_that_cannot_be_reached(chroma_server: ChromaServer) -> None:
    """Chroma Cloud is probed by the call its client makes to learn the key's tenant (identity), with
    the server's timeout and caching. Here the cloud client is pointed at a real ``chroma run`` (which
    answers the same call), then at nothing."""
    host, port = chroma_server.url.split("//")[1].split(":")
    cloud = ClientSpec("cloud", host=host, port=int(port), ssl=False, api_key=SecretStr("ck-test"))
    index = ChromaIndex(cloud, namespace="t", ef_search=40)
    try:
        assert index.client.heartbeat()
        assert index.problem() is None
        chroma_server.stop()
        time.sleep(HEARTBEAT_TTL)
        assert (index.problem() or "").startswith(
            f"Chroma Cloud at {host}:{port} does not answer its identity call: "
        )
    finally:
        index.close()
    nothing = ChromaIndex(
        ClientSpec("cloud", host="127.0.0.1", port=free_port(), ssl=False, api_key=SecretStr("ck-test")),
        namespace="t",
        ef_search=40,
    )
    assert "Connection refused" in (nothing.problem() or "")


def test_readiness_has_no_vector_index_check_when_vectors_are_in_postgresql(settings: Settings) -> None:
    with Citeline(settings) as cl:
        assert "vector_index" not in cl.readiness().checks


def test_a_server_started_before_chroma_serves_once_chroma_is_up(
    chroma: Settings, chroma_server: ChromaServer, tmp_path: Path
) -> None:
    """As an orchestrator starts them: citeline serve may come up before its Chroma. It starts, not
    ready (naming Chroma), and is ready once Chroma answers, with the start-up repair then done."""
    _ingest(chroma, tmp_path)
    chroma_server.stop()
    with Citeline(chroma) as cl:
        cl.warm_up()  # raised StoreError: citeline serve printed a traceback and exited
        assert cl.readiness().problems.keys() == {"vector_index"}
        chroma_server.start()
        time.sleep(HEARTBEAT_TTL)
        assert cl.readiness().ready
        assert [h.document_name for h in cl.search(SearchRequest("where are the flowers"))] == ["bees.txt"]


def test_a_queued_version_names_the_backend_it_will_be_built_in(settings: Settings) -> None:
    """POST /documents answers with the queued version: on a Chroma deployment it said pgvector."""
    chroma = settings.model_copy(update={"vector_backend": "chroma"})
    with Citeline(chroma) as cl:
        queued = cl.submit(Upload("pump.txt", io.BytesIO(b"Drain the pump."))).document
        pending = cl.submit(Upload("fan.txt", io.BytesIO(b"Oil the fan.")), index=False).document
        try:
            assert (queued.vector_index, pending.vector_index) == ("chroma", "chroma")
        finally:
            with cl.engine.begin() as conn:
                conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema_name(chroma.namespace)}" CASCADE'))
