"""``GET /stats``: counts over the namespace, as far as the key sees it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from citeline.api.deps import AccessDep, CitelineDep
from citeline.api.schemas import KEYED, Stats, answers

router = APIRouter(tags=["stats"])


@router.get(
    "/stats",
    summary="Documents per status and type, chunks, embedding model",
    response_model=None,
    operation_id="get_stats",
    responses=answers(Stats, *KEYED),
)
def stats(cl: CitelineDep, access: AccessDep) -> dict[str, Any]:
    return cl.stats(access=access)
