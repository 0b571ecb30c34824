"""The Celery runner: real Redis, real ``citeline worker`` processes, the same catalog as the test."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import statistics
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from citeline.engine import Citeline
from citeline.jobs.celery import QUEUE, TASK, WorkerProcess, celery_app, queue_of, send
from citeline.jobs.submit import Upload
from citeline.settings import Settings
from citeline.store.database import schema_name, server_url
from tests.conftest import free_port
from tests.jobs.conftest import Workers, wait_for_status
from tests.jobs.test_jobs import PUMP


def upload(name: str, text: str) -> Upload:
    return Upload(name, io.BytesIO(text.encode()))


def chunks_per_version(cl: Citeline) -> dict[uuid.UUID, int]:
    with cl.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT document_id, count(*) FROM chunks GROUP BY document_id"))
        return {r[0]: int(r[1]) for r in rows}


def test_uploads_are_built_by_a_celery_worker_soon_after_they_are_queued(
    celery_settings: Settings, workers: Workers
) -> None:
    workers.start(celery_settings)
    with Citeline(celery_settings) as cl:
        first = cl.submit(upload("pump.md", PUMP))
        assert first.document.status == "queued"
        done = cl.wait(first.document.id, timeout=180)
        assert done.status == "completed" and done.attempts == 1, workers.log()
        [hit, *_] = cl.search("how do I prime the pump?")
        assert hit.document_id == done.id
        # Enqueue to processing, with the worker warm: the catalog's own clock at both ends.
        pickups = []
        for i in range(8):
            doc = cl.wait(cl.submit(upload(f"unit-{i}.md", PUMP + f"\n\nUnit {i}.")).document.id, timeout=60)
            assert doc.status == "completed" and doc.started_at and doc.queued_at
            pickups.append((doc.started_at - doc.queued_at).total_seconds() * 1e3)
        assert chunks_per_version(cl) == {d.version_id: d.vector_count for d in cl.documents()}
    print(
        f"\ncelery pickup latency over {len(pickups)} documents: p50 {statistics.median(pickups):.1f} ms, "
        f"max {max(pickups):.1f} ms (load {os.getloadavg()[0]:.1f})"
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_worker_stopped_by_sigterm_stops_the_embedded_database_it_held(
    celery_settings: Settings, workers: Workers, tmp_path: Path
) -> None:
    # A data directory of its own: the session's other tests hold the shared one's server.
    data = tmp_path / "data"
    own = celery_settings.model_copy(update={"data_dir": data})
    postmaster, holders = data / "pg" / "postmaster.pid", data / "pg" / ".handle_pids.json"
    proc = workers.start(own)
    deadline = time.monotonic() + 120
    while not (holders.exists() and json.loads(holders.read_text())) and time.monotonic() < deadline:
        time.sleep(0.2)  # the pool process opens the store when it starts sweeping
    assert postmaster.exists() and json.loads(holders.read_text()), workers.log()

    os.killpg(proc.pid, signal.SIGTERM)  # a graceful stop, as systemd and docker stop send it
    proc.wait(60)

    deadline = time.monotonic() + 30
    while postmaster.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not postmaster.exists(), "the embedded PostgreSQL outlived the stopped worker\n" + workers.log()
    # No process of the worker still holds it (a dead pid left in the list is dropped by the next
    # process that lets go, see store.server._drop_dead_holders).
    assert not [pid for pid in json.loads(holders.read_text()) if alive(pid)]


def test_a_sweep_that_cannot_reach_the_broker_logs_one_line_not_a_traceback(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    unreachable = settings.model_copy(
        update={"job_runner": "celery", "redis_url": f"redis://127.0.0.1:{free_port()}/0"}
    )
    process = WorkerProcess(unreachable, celery_app(unreachable))
    try:
        with caplog.at_level(logging.WARNING, logger="citeline.jobs.celery"):
            process._sweep_logged(unreachable.namespace)
    finally:
        for cl, _limits in process._stores.values():
            cl.close()  # not process.stopped(): this test process holds the session's database server
    [record] = [r for r in caplog.records if r.name == "citeline.jobs.celery"]
    assert record.levelno == logging.WARNING and record.exc_info is None
    assert f"sweeping the queue of {unreachable.namespace} failed:" in record.getMessage()


def test_a_worker_whose_database_is_down_logs_one_line_a_poll_not_a_traceback(
    celery_settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    # Started while PostgreSQL was down, a worker logged a chained traceback of four exceptions at
    # every poll (opening the store raised StoreError, which the sweep did not expect).
    down = celery_settings.model_copy(
        update={"database_url": f"postgresql://citeline:s3cret@127.0.0.1:{free_port()}/citeline"}
    )
    process = WorkerProcess(down, celery_app(down))
    with caplog.at_level(logging.WARNING, logger="citeline.jobs.celery"):
        process._sweep_logged(down.namespace)
    [record] = [r for r in caplog.records if r.name == "citeline.jobs.celery"]
    assert record.levelno == logging.WARNING and record.exc_info is None
    message = record.getMessage()
    assert "cannot reach PostgreSQL" in message and "next poll" in message and "s3cret" not in message


def test_a_document_whose_worker_is_killed_completes_after_a_restart_without_duplicates(
    celery_settings: Settings, workers: Workers, tmp_path: Path
) -> None:
    gate = f"k{uuid.uuid4().hex[:8]}"
    gated = celery_settings.model_copy(update={"embedding_model": f"filegate:{gate}"})
    first = workers.start(gated)
    with Citeline(gated) as cl:
        doc = cl.submit(upload("pump.md", PUMP)).document
        assert wait_for_status(cl, doc, "processing").status == "processing", workers.log()
        workers.kill(first)  # in the middle of the document: its worker waits at the gate
        time.sleep(1.0)
        assert cl.document(str(doc.id)).status == "processing"
        assert cl.search("prime the pump") == []
        (tmp_path / gate).touch()
        workers.start(gated)
        done = cl.wait(doc.id, timeout=180)
        assert done.status == "completed" and done.attempts == 2, workers.log()
        assert [(v.version, v.status) for v in cl.versions(doc.id)] == [(1, "completed")]
        assert chunks_per_version(cl) == {done.version_id: done.vector_count}
        assert done.vector_count > 1 and cl.search("prime the pump")[0].document_id == doc.id


def test_a_message_delivered_more_than_once_builds_its_version_once(
    celery_settings: Settings, workers: Workers
) -> None:
    workers.start(celery_settings, concurrency=2)
    with Citeline(celery_settings) as cl:
        doc = cl.submit(upload("pump.md", PUMP)).document
        send(celery_app(celery_settings), [doc.version_id] * 3, celery_settings.namespace)
        done = cl.wait(doc.id, timeout=180)
        time.sleep(1.0)  # the extra deliveries have been taken by then
        assert redis.Redis.from_url(celery_settings.redis_url or "").llen(queue_of(celery_settings)) == 0
        again = cl.document(str(doc.id))
        assert done.status == again.status == "completed" and again.attempts == 1, workers.log()
        assert [(v.version, v.status) for v in cl.versions(doc.id)] == [(1, "completed")]
        assert chunks_per_version(cl) == {again.version_id: again.vector_count}


def test_a_message_waits_in_the_queue_of_the_vector_store_its_sender_writes_to(
    celery_settings: Settings,
) -> None:
    # A message names only a version and a namespace; the worker writes vectors into its own store. A
    # Chroma worker sharing Redis with pgvector workers built their namespaces into Chroma (and they
    # its namespace into pgvector), whose searches then all failed with model_mismatch.
    chroma_a = celery_settings.model_copy(update={"vector_backend": "chroma", "chroma_url": "http://a:8000"})
    chroma_b = chroma_a.model_copy(update={"chroma_url": "http://b:8000"})
    tenant = chroma_a.model_copy(update={"chroma_tenant": "clinic"})
    queues = [queue_of(s) for s in (celery_settings, chroma_a, chroma_b, tenant)]
    assert len(set(queues)) == 4
    assert queue_of(chroma_a.model_copy(update={"chroma_url": "http://a:8000/"})) == queues[1]

    broker = redis.Redis.from_url(celery_settings.redis_url or "")
    send(celery_app(chroma_a), [uuid.uuid4(), uuid.uuid4()], celery_settings.namespace)
    send(celery_app(celery_settings), [uuid.uuid4()], celery_settings.namespace)

    assert [broker.llen(q) for q in queues] == [1, 2, 0, 0]


def test_a_transient_failure_is_retried_by_the_worker_with_backoff(
    celery_settings: Settings, workers: Workers
) -> None:
    faulty = celery_settings.model_copy(
        update={"embedding_model": f"faulty:2-{uuid.uuid4().hex[:8]}", "job_retries": 3}
    )
    workers.start(faulty)
    with Citeline(faulty) as cl:
        done = cl.wait(cl.submit(upload("pump.md", PUMP)).document.id, timeout=180)
    assert done.status == "completed" and done.attempts == 3 and done.error is None, workers.log()
    assert done.started_at and done.queued_at
    # Two retries, after 0.2 s and 0.4 s.
    assert (done.started_at - done.queued_at).total_seconds() >= 0.6


def test_a_job_over_its_hard_time_limit_fails_and_leaves_no_chunk(
    celery_settings: Settings, workers: Workers, tmp_path: Path
) -> None:
    gate = f"h{uuid.uuid4().hex[:8]}"
    gated = celery_settings.model_copy(
        update={"embedding_model": f"filegate:{gate}", "job_hard_time_limit": 1.0}
    )
    workers.start(gated)
    with Citeline(gated) as cl:
        stuck = cl.submit(upload("pump.md", PUMP)).document
        failed = wait_for_status(cl, stuck, "failed")
        assert failed.error and "CITELINE_JOB_HARD_TIME_LIMIT" in failed.error, workers.log()
        (tmp_path / gate).touch()  # the stuck build ends now: what it made is never swapped in
        time.sleep(3.0)
        assert cl.document(str(stuck.id)).status == "failed"
        assert chunks_per_version(cl) == {} and cl.search("prime the pump") == []


def test_readiness_names_an_unreachable_broker_and_what_happens_to_uploads(settings: Settings) -> None:
    # /health/ready said only "job_runner": false while Redis was down, and an admin could not tell
    # the broker from a dead thread; the reason now names the broker (without its password).
    port = free_port()
    unreachable = settings.model_copy(
        update={"job_runner": "celery", "redis_url": f"redis://:s3cret@127.0.0.1:{port}/0"}
    )
    with Citeline(unreachable) as cl:
        cl.start_jobs()
        found = cl.readiness()
        checks, problems = found.checks, found.problems
        assert checks["job_runner"] is False and checks["database"] is True and not found.ready
        reason = problems["job_runner"]
        assert f"127.0.0.1:{port}" in reason and "does not answer" in reason and "s3cret" not in reason
        assert "queued" in reason  # uploads are still taken, and wait in the catalog
        assert "database" not in problems  # the embedder loads at the first search or at serve's start


def test_a_deployments_queue_is_named_by_its_database_not_by_how_its_users_log_in(
    celery_settings: Settings,
) -> None:
    def at(url: str | None) -> str:
        return queue_of(celery_settings.model_copy(update={"database_url": url}))

    shared = at("postgresql://alice:one@db.internal:5432/citeline")
    assert at("postgresql://bob:two@DB.internal/citeline") == shared  # default port, other user
    assert at("postgresql://alice@db.internal:5433/citeline") != shared
    assert at("postgresql://alice@db.internal/clinic") != shared
    assert at("postgresql://alice@db2.internal/citeline") != shared
    assert at("postgresql://alice@localhost/citeline") == at("postgresql://alice@127.0.0.1/citeline")
    assert at(None) != at("postgresql://postgres@localhost/postgres")  # the embedded server
    # The namespace is in the message, not in the queue: one worker builds every namespace.
    assert queue_of(celery_settings.model_copy(update={"namespace": "other"})) == at(None)


@pytest.fixture
def second_deployment(celery_settings: Settings, tmp_path: Path) -> Iterator[Settings]:
    """Another deployment on the same Redis: its own database (on the test's server, reached by URL),
    its own folder of originals, and the same namespace name, as two teams' ``default`` would be."""
    database = f"ops_{uuid.uuid4().hex[:10]}"
    url = make_url(server_url(celery_settings))
    with Citeline(celery_settings) as cl, cl.engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(sa.text(f'CREATE DATABASE "{database}"'))
    other = url.set(drivername="postgresql", database=database).render_as_string(hide_password=False)
    yield celery_settings.model_copy(update={"database_url": other, "data_dir": tmp_path / "other"})
    with Citeline(celery_settings) as cl, cl.engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(
            sa.text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        )


def test_two_deployments_sharing_one_redis_never_take_each_others_messages(
    celery_settings: Settings, second_deployment: Settings, workers: Workers
) -> None:
    # Workers of two databases on one Redis read one queue: a worker took the other deployment's
    # message, found no such version in its own catalog and dropped it, and the document waited for
    # its own deployment's sweeper to send it again.
    ours, theirs = celery_settings, second_deployment
    assert queue_of(ours) != queue_of(theirs)
    workers.start(theirs)
    with Citeline(ours) as cl, Citeline(theirs) as other:
        waiting = cl.submit(upload("pump.md", PUMP)).document  # no worker of ours yet
        built = other.wait(other.submit(upload("valve.md", PUMP + "\n\nValve.")).document.id, timeout=180)
        assert built.status == "completed" and built.attempts == 1, workers.log()
        time.sleep(1.0)  # five sweeps of theirs
        assert redis.Redis.from_url(ours.redis_url or "").llen(queue_of(ours)) == 1
        assert cl.document(str(waiting.id)).status == "queued"
        assert str(waiting.version_id) not in workers.log()

        workers.start(ours)
        done = cl.wait(waiting.id, timeout=180)
        assert done.status == "completed" and done.attempts == 1, workers.log()
        assert [h.document_id for h in cl.search("prime the pump")][:1] == [waiting.id]
        assert [h.document_id for h in other.search("prime the pump")][:1] == [built.id]
    workers.stop()  # before their database is dropped


def test_a_worker_drains_messages_an_older_citeline_left_in_the_old_queue(
    celery_settings: Settings, workers: Workers
) -> None:
    # Up to this version every pgvector worker read the queue 'citeline': messages left there by
    # processes not yet upgraded are still built. The sweep would send them again only after a poll,
    # here a minute away.
    slow = celery_settings.model_copy(update={"job_poll_seconds": 60.0})
    with Citeline(slow.model_copy(update={"job_runner": "thread"})) as cl:
        doc = cl.submit(upload("pump.md", PUMP)).document  # queued, no message sent
        celery_app(slow).send_task(TASK, args=[str(doc.version_id), slow.namespace], queue=QUEUE)
        workers.start(slow)
        done = cl.wait(doc.id, timeout=60)
        assert done.status == "completed" and done.attempts == 1, workers.log()
        assert redis.Redis.from_url(slow.redis_url or "").llen(QUEUE) == 0


def test_a_message_for_a_namespace_this_database_lacks_creates_nothing(
    celery_settings: Settings, workers: Workers
) -> None:
    # A message another deployment left in the old shared queue names a namespace of its own
    # database: opening it here created an empty namespace (a schema) in this one.
    absent = f"t_{uuid.uuid4().hex[:12]}"
    workers.start(celery_settings)
    send(celery_app(celery_settings), [uuid.uuid4()], absent)
    with Citeline(celery_settings) as cl:
        # One worker process takes messages in order: once a later document is built, it has
        # handled the stray one.
        done = cl.wait(cl.submit(upload("pump.md", PUMP)).document.id, timeout=180)
        assert done.status == "completed", workers.log()
        with cl.engine.connect() as conn:
            schemas = conn.execute(
                sa.text("SELECT 1 FROM information_schema.schemata WHERE schema_name = :s"),
                {"s": schema_name(absent)},
            ).all()
    assert schemas == [], workers.log()
    assert f"namespace {absent}" in workers.log()
