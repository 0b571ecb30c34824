"""The application factory: one :class:`Citeline` per process, warmed up before the first request."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from citeline.api import errors, schemas
from citeline.api.deps import refuse_nul, refuse_unknown_query
from citeline.api.head import HeadAsGet
from citeline.api.limits import BodySizeLimit, GenerationSlots, RateLimiter, UrlLengthLimit
from citeline.api.observe import RequestMetrics
from citeline.api.request_id import RequestIdMiddleware
from citeline.api.routes import chat, conversations, documents, health, ingest, keys, metrics, search, stats
from citeline.engine import Citeline
from citeline.errors import CitelineError
from citeline.settings import Settings, load_settings
from citeline.store.database import release_server
from citeline.web.pages import mount_pages

log = logging.getLogger("citeline.api")

OPEN_MODE_WARNING = (
    "OPEN MODE: this server answers requests without an API key, as an admin. Use it only to try "
    "citeline out on this machine; create keys with `citeline keys create` and restart without --open."
)


def create_app(settings: Settings | None = None, *, own_process: bool = False) -> FastAPI:
    """The citeline API over the store ``settings`` name (default: from the environment).

    ``own_process``: the app is the process (``citeline serve``), which lets go of the embedded
    database server when the app shuts down (see :func:`~citeline.store.database.release_server`).
    """
    settings = settings or load_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        cl = Citeline(settings)
        try:
            cl.warm_up()
            # Documents uploaded here (or queued before a restart) are built by this process's runner.
            cl.start_jobs()
            app.state.citeline = cl
            app.state.generation_slots = GenerationSlots(settings)
            app.state.rate_limiter = RateLimiter(settings.api_rate_limit, settings.api_rate_limit_redis_url)
            if settings.api_open:
                log.warning(OPEN_MODE_WARNING)
            yield
        finally:
            cl.close()
            if own_process:
                release_server(settings)

    app = FastAPI(
        title="citeline",
        summary="Search documents and answer questions with verified citations.",
        version="0.1.0",
        lifespan=lifespan,
        # FastAPI's own /docs and /redoc load their scripts from a CDN: the pages serve /docs from this
        # server instead (citeline.web.pages), and ReDoc is not offered.
        docs_url=None,
        redoc_url=None,
        generate_unique_id_function=schemas.operation_id,
    )
    errors.install(app)
    app.add_middleware(BodySizeLimit, settings=settings)
    app.add_middleware(UrlLengthLimit)
    app.add_middleware(HeadAsGet)
    # Outside the limits, so a request they refuse is counted; inside the ids, so the log sees its end.
    app.add_middleware(RequestMetrics)
    app.add_middleware(RequestIdMiddleware)  # added last: outermost, so every response gets the id
    for module in (search, chat, conversations, documents, ingest, stats, keys, health, metrics):
        app.include_router(module.router, dependencies=[Depends(refuse_unknown_query), Depends(refuse_nul)])
    mount_pages(app)
    _complete_openapi(app)
    return app


def _complete_openapi(app: FastAPI) -> None:
    """Have ``/openapi.json`` say what FastAPI cannot see from the routes (see schemas.complete)."""
    made = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = schemas.complete(made(), [ingest.UrlBody, schemas.UploadForm])
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to extend it


#: The file ``citeline serve`` has its server processes report a start-up failure in: a variable the
#: command sets for the processes it starts, not a setting.
STARTUP_FAILURE_FILE = "_CITELINE_SERVE_STARTUP_FAILURE"


def app_from_env() -> FastAPI:
    """The factory ``citeline serve`` hands uvicorn: settings from ``CITELINE_*`` variables."""
    app = create_app(load_settings(), own_process=True)
    report = os.environ.get(STARTUP_FAILURE_FILE)
    if report:
        app.add_middleware(StartupFailureReport, report=Path(report))
    return app


class StartupFailureReport:
    """Hands a start-up that failed with a :class:`CitelineError` (the database out of reach, say) to
    ``citeline serve``, which reports it as every command reports an error: one ``error:`` line and the
    error's exit code. Without it uvicorn logs Starlette's traceback and exits 3, or 0 from the parent
    of several server processes. uvicorn's own lines ('Application startup failed') stay."""

    def __init__(self, app: ASGIApp, report: Path) -> None:
        self.app = app
        self.report = report

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return
        held: list[Message] = []

        async def holding(message: Message) -> None:
            # Starlette sends the failure, its traceback the message, before it raises the error: the
            # message waits until the error says whether it is one of citeline's.
            if message["type"] == "lifespan.startup.failed":
                held.append(message)
            else:
                await send(message)

        try:
            await self.app(scope, receive, holding)
        except CitelineError as exc:
            if held:
                write_startup_failure(self.report, exc)
                held[:] = [{**held[0], "message": ""}]
            raise
        finally:
            for message in held:
                await send(message)


def write_startup_failure(path: Path, exc: CitelineError) -> None:
    """Record ``exc`` for :func:`read_startup_failure`; several processes failing alike replace each
    other's record whole."""
    written = path.with_name(f"{path.name}.{os.getpid()}")
    written.write_text(f"{exc.exit_code}\n{exc}", encoding="utf-8")
    written.replace(path)


def read_startup_failure(path: Path) -> tuple[int, str] | None:
    """The exit code and message of the start-up failure recorded at ``path``; None if there is none."""
    try:
        code, _, message = path.read_text(encoding="utf-8").partition("\n")
    except FileNotFoundError:
        return None
    return int(code), message
