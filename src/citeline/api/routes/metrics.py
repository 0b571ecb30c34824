"""``GET /metrics``: what the server has done, in Prometheus text format, for admins (see
:mod:`citeline.metrics` and docs/deploying.md)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from starlette.responses import Response

from citeline.api.deps import AdminDep, CitelineDep
from citeline.api.schemas import ADMIN, errors
from citeline.metrics import CONTENT_TYPE

router = APIRouter(tags=["metrics"])


@router.get(
    "/metrics",
    summary="Metrics in Prometheus text format (requests, searches, answers, ingest, the catalog)",
    response_class=Response,
    operation_id="get_metrics",
    responses={
        200: {
            "description": "Success.",
            "content": {CONTENT_TYPE.split(";")[0]: {"schema": {"type": "string"}}},
        },
        **errors(*ADMIN),
    },
)
async def get_metrics(cl: CitelineDep, _: AdminDep) -> Response:
    # A thread: reading every process's files, and the catalog now and then, must not hold the loop.
    return Response(await run_in_threadpool(cl.metrics), media_type=CONTENT_TYPE)
