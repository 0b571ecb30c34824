"""The Celery runner: documents built by ``citeline worker`` processes, fed through Redis.

The catalog stays the queue. A message says only "version V of namespace N is queued", and the task
claims exactly that version (:meth:`Ingestor.run_jobs` with ``version_ids``), so statuses, retries,
limits and cancelling are the thread runner's. Messages are acknowledged late: one whose worker is
killed mid-job is delivered again, and the second delivery claims nothing unless the version went back
to the queue, so a version is never built twice at once and never leaves duplicate chunks.

What a message cannot carry, the catalog keeps. A killed worker leaves its version ``processing`` under
a run lock that died with its database connection. Every worker process sweeps the queues it knows
every ``job_poll_seconds`` (one sweeper at a time per namespace): it fails versions over the hard time
limit, requeues (or fails) abandoned ones, and, when the broker holds no waiting message, sends one for
each version that has been ready in the catalog for a poll interval without being claimed (requeued
versions, versions queued while Redis was down).
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from celery import Celery
from celery.signals import worker_process_init, worker_process_shutdown
from kombu.exceptions import KombuError, OperationalError
from kombu.utils.url import maybe_sanitize_url
from sqlalchemy.engine import make_url

from citeline.engine import Citeline
from citeline.errors import ConfigError, StoreError
from citeline.ingest import Outcome, RetryPolicy
from citeline.jobs.runner import JobLimits, sweep
from citeline.settings import Settings
from citeline.store import catalog
from citeline.store.database import release_server, schema_name

log = logging.getLogger(__name__)

#: The task a message runs, and the prefix of every broker queue (see :func:`queue_of`). Before queues
#: were per deployment, every pgvector deployment's messages waited in the queue named :data:`QUEUE`.
TASK = "citeline.build"
QUEUE = "citeline"

#: A message send that cannot reach Redis gives up quickly: the version is queued in the catalog
#: whatever happens, and a worker's sweep sends its message once Redis is back.
_SEND_RETRY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.5, "interval_max": 0.5}

#: The broker or the database out of reach (StoreError: the store could not even be opened): one line
#: a poll says so (Celery's own log names the broker too), where a chained traceback a poll buried it.
_OUT_OF_REACH = (StoreError, OSError, OperationalError, sa.exc.OperationalError)


#: Addresses that name a PostgreSQL server on this machine, however they are spelled.
_LOCAL_HOSTS = {"", "localhost", "127.0.0.1", "::1"}


def deployment_of(settings: Settings) -> str:
    """What names the store of the processes whose settings are ``settings``: the catalog's database
    and, for Chroma, the vector store; the namespace is not part of it (a message names it).

    The database is the embedded server of this machine's data directory, or the host, port and
    database name of ``database_url`` (user and password left out: two users of one database share its
    catalog). A server on this machine (embedded, ``localhost``, a Unix socket) is told apart from
    another machine's by this machine's host name.
    """
    machine = socket.gethostname()
    if settings.database_url is None:
        where = f"embedded:{machine}:{Path(settings.data_dir).expanduser().resolve()}"
    else:
        url = make_url(settings.database_url)
        host = (url.host or str(url.query.get("host") or "")).lower()
        if host in _LOCAL_HOSTS or host.startswith("/"):
            host = f"{machine}:{'localhost' if host in _LOCAL_HOSTS else host}"
        where = f"postgresql:{host}:{url.port or 5432}/{url.database or url.username or ''}"
    if settings.vector_backend == "chroma":
        where += f"|chroma:{_chroma_of(settings)}"
    return where


def queue_of(settings: Settings) -> str:
    """The broker queue of the processes that build documents into the store ``settings`` name
    (:func:`deployment_of`): ``citeline.<digest>``.

    A message says only which version of which namespace to build, and a worker builds it in its own
    store. Workers of two databases sharing one Redis took each other's messages, found no such version
    and dropped them, and the document waited for its own deployment's sweep to send it again (and
    before Chroma stores had queues of their own, a worker built another store's versions into its own).
    A message now waits in the queue of its sender's store, which only that store's workers read.
    """
    return f"{QUEUE}.{hashlib.sha256(deployment_of(settings).encode()).hexdigest()[:16]}"


def legacy_queue_of(settings: Settings) -> str:
    """The queue that citeline sent ``settings``' messages to before queues were per deployment, and
    that a worker still reads so that messages older processes left there are built (:func:`run_worker`)."""
    if settings.vector_backend == "pgvector":
        return QUEUE
    return f"{QUEUE}.chroma.{hashlib.sha256(_chroma_of(settings).encode()).hexdigest()[:12]}"


def _chroma_of(settings: Settings) -> str:
    """The Chroma store: server, or cloud, tenant and database; or the data directory of an embedded one."""
    if settings.chroma_url:
        where = settings.chroma_url.rstrip("/")
    elif settings.chroma_api_key is not None:
        where = "cloud"
    else:
        where = f"embedded:{Path(settings.data_dir).resolve()}"
    return f"{where}|{settings.chroma_tenant or ''}|{settings.chroma_database or ''}"


def celery_app(settings: Settings) -> Celery:
    """The Celery application of ``settings``: Redis broker, late acknowledgement, citeline's limits.

    Celery's own time limits stand behind the catalog's by a grace of two polls. The soft one
    interrupts a job stuck inside one page (the catalog's soft limit is checked between pages): its run
    ends, and the version is requeued like any interrupted job until its retries are spent. The hard
    one ends the worker process after the sweep has failed the version for its hard limit.
    """
    if not settings.redis_url:
        raise ConfigError(
            "the celery job runner needs a broker: set CITELINE_REDIS_URL (e.g. redis://localhost:6379/0)"
        )
    grace = max(1.0, 2 * settings.job_poll_seconds)
    app = Celery("citeline", broker=settings.redis_url, set_as_current=False)
    app.conf.update(
        task_default_queue=queue_of(settings),
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_ignore_result=True,
        task_soft_time_limit=settings.job_soft_time_limit + grace,
        task_time_limit=settings.job_hard_time_limit + grace,
        # One message at a time per worker process: a long document never holds back others that
        # another process could build.
        worker_prefetch_multiplier=1,
        # Redis delivers an unacknowledged message again after this long; a job lasts at most the hard
        # limit, so no running job is delivered twice while its worker lives.
        broker_transport_options={"visibility_timeout": settings.job_hard_time_limit + 2 * grace},
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    return app


def send(app: Celery, version_ids: Sequence[uuid.UUID], namespace: str, *, countdown: float = 0) -> None:
    """Send a build message for each version to ``app``'s queue (:func:`queue_of`); a broker that cannot
    be reached is logged, not raised."""
    for version_id in version_ids:
        try:
            app.send_task(
                TASK,
                args=[str(version_id), namespace],
                queue=app.conf.task_default_queue,
                countdown=countdown or None,
                retry=True,
                retry_policy=_SEND_RETRY,
            )
        except (KombuError, OSError) as exc:
            log.warning(
                "version %s stays queued: the broker is unreachable (%s); a worker sends it when it is back",
                version_id,
                exc,
            )


class CeleryRunner:
    """The :class:`~citeline.jobs.JobRunner` of processes that queue documents for Celery workers.

    It builds nothing: :meth:`notify` sends each queued version to the workers through Redis.
    """

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._app = celery_app(settings)
        self._started = False

    def start(self) -> None:
        self._started = True

    def notify(self, version_ids: Sequence[uuid.UUID] = ()) -> None:
        send(self._app, version_ids, self._settings.namespace)

    def stop(self, timeout: float = 10.0) -> None:
        self._started = False
        self._app.close()

    @property
    def problem(self) -> str | None:
        """Why documents are not being sent to the workers: not started, or Redis does not answer."""
        if not self._started:
            return "the job runner is not started"
        try:
            with self._app.connection_for_write() as conn:
                conn.ensure_connection(max_retries=1, timeout=2)
        except (KombuError, OSError) as exc:
            where = maybe_sanitize_url(self._settings.redis_url or "", mask="***")
            # Queuing goes on (the catalog is the queue): say so, so nobody re-uploads what is waiting.
            return (
                f"the broker at {where} does not answer ({exc}); documents are still queued, and "
                "wait in the catalog until a worker sends them once it is back"
            )
        return None


class WorkerProcess:
    """What one worker process holds: a store per namespace it builds for, and its sweeper thread.

    Created before Celery forks its pool and filled only in each pool process (:meth:`started`), so no
    database connection is ever shared between processes.
    """

    def __init__(self, settings: Settings, app: Celery) -> None:
        self.settings = settings
        self.app = app
        self._stores: dict[str, tuple[Citeline, JobLimits]] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._retry = RetryPolicy(settings.job_retries, settings.job_retry_delay)

    def store(self, namespace: str) -> tuple[Citeline, JobLimits]:
        """The store of ``namespace`` in this process, opened on first use; refused once the process is
        stopping (:class:`_StoppingError`), and for a namespace other than the worker's own that its
        database does not hold (:class:`_AbsentError`)."""
        with self._lock:
            if self._stopping.is_set():
                # A sweep that began before the stop must not open the store again after stopped()
                # let go of the database server: the process would exit holding it.
                raise _StoppingError(f"the worker process is stopping; {namespace} is not opened again")
            if namespace not in self._stores:
                own = self.settings.namespace
                if own not in self._stores:
                    cl = Citeline(self.settings)
                    self._stores[own] = (cl, JobLimits(cl.engine, cl.settings))
                if namespace != own:
                    self._open_existing(namespace)
            return self._stores[namespace]

    def _open_existing(self, namespace: str) -> None:
        """Open ``namespace`` beside the worker's own if its database holds it: opening creates a
        namespace, and a message from another deployment (one left in the queue every deployment shared
        before, see :func:`legacy_queue_of`) created an empty one in this database."""
        own = self._stores[self.settings.namespace][0]
        with own.engine.connect() as conn:
            found = conn.execute(
                sa.text("SELECT 1 FROM information_schema.schemata WHERE schema_name = :s"),
                {"s": schema_name(namespace)},
            ).first()
        if found is None:
            raise _AbsentError(namespace)
        cl = own.derive(namespace=namespace)
        self._stores[namespace] = (cl, JobLimits(cl.engine, cl.settings))

    def build(self, version_id: uuid.UUID, namespace: str) -> None:
        """Claim ``version_id`` and build it; a transient failure sends its retry after its delay."""
        try:
            cl, limits = self.store(namespace)
        except _AbsentError:
            log.warning(
                "dropped the message for version %s of namespace %s: this worker's database has no such "
                "namespace (a message of another deployment, or of a namespace since deleted)",
                version_id,
                namespace,
            )
            return
        log.info("building version %s of %s", version_id, namespace)
        ingestor = cl.ingestor()
        results = ingestor.run_jobs(limit=1, version_ids=[version_id], retry=self._retry, should_stop=limits)
        for result in results:
            if result.outcome is Outcome.RETRYING and result.document is not None:
                delay = self._retry.delay_after(result.document.attempts)
                send(self.app, [version_id], namespace, countdown=delay)
            log.info(
                "finished version %s: %s: %s", version_id, result.source, result.error or result.outcome.value
            )

    def started(self, **_: Any) -> None:
        """In a new pool process: open the worker's own namespace, load the model, start sweeping."""
        self._stopping.clear()
        threading.Thread(target=self._sweeping, name="citeline-job-sweep", daemon=True).start()

    def stopped(self, **_: Any) -> None:
        with self._lock:
            self._stopping.set()
            stores, self._stores = list(self._stores.values()), {}
        for cl, _limits in reversed(stores):
            cl.close()
        # A pool process holds the embedded database server like any citeline process, but exits
        # without running atexit handlers, where the hold would otherwise be let go: the last worker
        # to stop would leave PostgreSQL running with no citeline process left.
        if stores:
            release_server(self.settings)

    def _sweeping(self) -> None:
        try:
            self.store(self.settings.namespace)[0].warm_up(search=False)
        except _StoppingError:
            return
        except _OUT_OF_REACH as exc:
            log.warning(
                "opening namespace %s failed: %s; trying again at the next sweep",
                self.settings.namespace,
                exc,
            )
        except Exception:
            log.exception(
                "opening namespace %s failed; trying again at the next sweep", self.settings.namespace
            )
        while not self._stopping.wait(self.settings.job_poll_seconds):
            with self._lock:
                namespaces = list(self._stores) or [self.settings.namespace]
            for namespace in namespaces:
                self._sweep_logged(namespace)

    def _sweep_logged(self, namespace: str) -> None:
        """One sweep of ``namespace``; a failure is logged, and the next poll tries again."""
        try:
            self._sweep(namespace)
        except _StoppingError:
            return
        except _OUT_OF_REACH as exc:
            log.warning("sweeping the queue of %s failed: %s; trying again at the next poll", namespace, exc)
        except Exception:
            log.exception("sweeping the queue of %s failed; trying again at the next poll", namespace)

    def _sweep(self, namespace: str) -> None:
        cl, _limits = self.store(namespace)
        with cl.engine.begin() as conn:
            if not catalog.try_sweep(conn):
                return
            sweep(conn.engine, cl.settings)  # in its own transaction; this one holds the sweep lock
            if self._waiting() == 0:
                ready = catalog.ready_jobs(conn, idle_for=cl.settings.job_poll_seconds)
                if ready:
                    log.info("%s: sending %d queued version(s) that had no message", namespace, len(ready))
                    send(self.app, ready, namespace)

    def _waiting(self) -> int:
        """Messages waiting in the broker's queue (not those a worker holds)."""
        with self.app.connection_for_write() as conn:
            declared = conn.default_channel.queue_declare(queue=self.app.conf.task_default_queue)
        return int(declared.message_count)


class _StoppingError(Exception):
    """The worker process is stopping: no store is opened any more."""


class _AbsentError(Exception):
    """A message names a namespace that the worker's database does not hold."""


def run_worker(settings: Settings, *, concurrency: int, loglevel: str = "INFO") -> None:
    """Run a Celery worker of ``concurrency`` processes until it is stopped (``citeline worker``)."""
    app = celery_app(settings)
    process = WorkerProcess(settings, app)

    @app.task(name=TASK)  # type: ignore[untyped-decorator]
    def build(version_id: str, namespace: str) -> None:
        process.build(uuid.UUID(version_id), namespace)

    worker_process_init.connect(process.started, weak=False)
    worker_process_shutdown.connect(process.stopped, weak=False)
    app.worker_main(
        [
            "worker",
            f"--concurrency={concurrency}",
            "--pool=prefork",
            # Messages that citeline before per-deployment queues left in the old one are still built.
            f"--queues={app.conf.task_default_queue},{legacy_queue_of(settings)}",
            f"--loglevel={loglevel}",
            f"--hostname=citeline-{os.getpid()}@%h",
            # Workers share nothing but Redis and PostgreSQL: no chatter between them to wait for.
            "--without-gossip",
            "--without-mingle",
        ]
    )
