"""How ``citeline serve`` runs uvicorn: one process as uvicorn runs it, or N under a supervisor that
lets a busy process be busy, says why one died, and stops listening as soon as it is told to stop.

With ``--workers N`` uvicorn's supervisor (``uvicorn.supervisors.Multiprocess``) pings each server
process every half second and kills one that does not answer within ``timeout_worker_healthcheck``
(uvicorn's default: 5 s). A process answers from a Python thread, which cannot run while a C call holds
the GIL: the local answering model does for seconds on a loaded machine, and the chats of the process
killed under it were reset, the log saying only "Child process [pid] died". The timeout is
``CITELINE_API_WORKER_HEALTHCHECK_SECONDS`` here, and a process that dies is logged with why.

:class:`Supervisor` subclasses uvicorn's supervisor and reimplements one of its methods; it was written
against uvicorn 0.54.0 (``uvicorn/supervisors/multiprocess.py``) and is the one place that relies on
uvicorn's internals for the processes, as :mod:`citeline.api.protocol` is for HTTP.
"""

from __future__ import annotations

import contextlib
import logging
import signal
from typing import Any

import uvicorn
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors.multiprocess import Multiprocess, Process

from citeline.api.uvicorn_internals import Uses
from citeline.metrics import forget_process

logger = logging.getLogger("uvicorn.error")


def run(app: str, *, workers: int, healthcheck_seconds: int, **options: Any) -> None:
    """``uvicorn.run(app, workers=workers, **options)``, with :class:`Supervisor` for ``workers > 1``."""
    options["timeout_worker_healthcheck"] = healthcheck_seconds
    if workers == 1:
        uvicorn.run(app, workers=1, **options)
        return
    # What uvicorn.run does for workers > 1, with this supervisor in place of its own.
    config = uvicorn.Config(app, workers=workers, **options)
    sockets = [config.bind_socket()]
    with contextlib.suppress(KeyboardInterrupt):  # as uvicorn.run: Ctrl-C has stopped the processes
        Supervisor(config, sockets, healthcheck_seconds=healthcheck_seconds).run()


def why_it_ended(exitcode: int | None, unanswered: bool, healthcheck_seconds: float) -> str:
    """What happened to a server process the supervisor found gone or unanswering."""
    if unanswered:
        return (
            f"did not answer its health check within {healthcheck_seconds:g} s and was killed "
            "(busy with the GIL held, or hung: see CITELINE_API_WORKER_HEALTHCHECK_SECONDS)"
        )
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        hint = " (from outside: the kernel's OOM killer sends it when memory runs out)"
        return f"was killed by {name}" + (hint if name == "SIGKILL" else "")
    return f"exited with code {exitcode}"


#: What :class:`Supervisor` overrides or reads of uvicorn's (checked as ``citeline serve`` starts).
UVICORN_USES = (
    # The health-check timeout is passed to uvicorn.run as well: one process answers it too.
    Uses(uvicorn.Config, methods=(), attributes={"__init__": ("timeout_worker_healthcheck",)}),
    Uses(
        Multiprocess,
        methods=("run", "terminate_all", "keep_subprocess_alive"),
        attributes={"__init__": ("config", "sockets", "processes", "should_exit")},
    ),
    Uses(
        Process,
        methods=("ping", "kill", "join", "start"),
        properties=("exitcode", "pid"),
        attributes={"__init__": ("process",)},
    ),
)


class Supervisor(Multiprocess):
    """uvicorn's supervisor of server processes, with the health-check timeout given here, a log line
    saying why a process it replaces ended, and the port closed when the processes are told to stop."""

    def __init__(self, config: uvicorn.Config, sockets: list[Any], *, healthcheck_seconds: int) -> None:
        super().__init__(config, sockets)
        self.healthcheck_seconds = healthcheck_seconds

    def terminate_all(self) -> None:
        super().terminate_all()
        # A stop: each process closes its copy of the listening socket first thing in its shutdown
        # (uvicorn's Server.shutdown), and this one must too. Kept open here while the processes
        # finish their requests, the port went on listening: the kernel queued new connections that
        # no process would accept, and reset them only when the supervisor exited, up to a minute
        # later. Closed, they are refused at once, as with one process, and clients retry elsewhere.
        for sock in self.sockets:
            sock.close()

    def keep_subprocess_alive(self) -> None:
        # uvicorn 0.54.0's, with the process's fate logged: a process alive at the OS's level that
        # does not answer in time is the one the supervisor kills.
        if self.should_exit.is_set():
            return
        for idx, process in enumerate(self.processes):
            running = process.process.is_alive()
            if running and process.ping(timeout=self.healthcheck_seconds):
                continue
            unanswered = running and process.process.is_alive()
            process.kill()
            process.join()
            if process.exitcode == STARTUP_FAILURE:
                # It failed before serving (the app, the store, the socket): every restart would too.
                logger.error(f"Child process [{process.pid}] failed to start, stopping the parent process.")
                self.should_exit.set()
                return
            if self.should_exit.is_set():
                return
            forget_process(process.pid)  # its answer slots are no longer in use
            why = why_it_ended(process.exitcode, unanswered, self.healthcheck_seconds)
            logger.warning(f"Child process [{process.pid}] {why}; starting another")
            replacement = Process(self.config, self.sockets)
            replacement.start()
            self.processes[idx] = replacement
