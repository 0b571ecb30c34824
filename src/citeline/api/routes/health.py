"""``GET /health/live`` and ``GET /health/ready``: the only routes that need no key."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from citeline.api.deps import CitelineDep, SlotsDep

router = APIRouter(prefix="/health", tags=["health"])


@router.get("/live", summary="The process answers")
async def live() -> dict[str, str]:
    return {"status": "live"}


@router.get("/ready", summary="The database answers and the embedder is loaded")
def ready(cl: CitelineDep, slots: SlotsDep) -> JSONResponse:
    problems: dict[str, str] = {}
    checks = cl.readiness(problems)
    ok = all(checks.values())
    body: dict[str, Any] = {
        "status": "ready" if ok else "not ready",
        **checks,
        "generations": asdict(slots.counts),
    }
    if problems:
        body["problems"] = problems
    return JSONResponse(body, status_code=200 if ok else 503)
