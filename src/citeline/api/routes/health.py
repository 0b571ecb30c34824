"""``GET /health/live`` and ``GET /health/ready``: the only routes that need no key."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from citeline.api.deps import CitelineDep, SlotsDep
from citeline.api.schemas import EVERY_ROUTE, Live, Readiness, answers

router = APIRouter(prefix="/health", tags=["health"])


@router.get(
    "/live",
    summary="The process answers",
    response_model=None,
    operation_id="health_live",
    responses=answers(Live, *EVERY_ROUTE),
)
async def live() -> dict[str, str]:
    return {"status": "live"}


@router.get(
    "/ready",
    summary="The database answers and the embedder is loaded",
    operation_id="health_ready",
    responses={
        **answers(Readiness, *EVERY_ROUTE, description="Ready."),
        503: {"model": Readiness, "description": "Not ready: problems says which check failed and why."},
    },
)
def ready(cl: CitelineDep, slots: SlotsDep) -> JSONResponse:
    found = cl.readiness()
    body: dict[str, Any] = {
        "status": "ready" if found.ready else "not ready",
        **found.checks,
        "generations": asdict(slots.counts),
    }
    if found.problems:
        body["problems"] = found.problems
    return JSONResponse(body, status_code=200 if found.ready else 503)
