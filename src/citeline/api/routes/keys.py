"""``POST/GET/DELETE /keys``: API keys, for admins."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from pydantic import Field

from citeline.access import Role
from citeline.api.bodies import RequestBody, Scope
from citeline.api.deps import AccessDep, AdminDep, CitelineDep
from citeline.api.errors import field_named
from citeline.api.schemas import ADMIN, KEYED, CreatedKey, Key, KeyList, MyKey, answers
from citeline.errors import InvalidRequestError

router = APIRouter(prefix="/keys", tags=["keys"])


class KeyBody(RequestBody):
    role: Role = Field(description="admin (everything) or reader (search, chat, reading within scopes).")
    scopes: list[Scope] | None = Field(default=None, description="A reader's scopes (at least one).")
    all_scopes: bool = Field(default=False, description="A reader of every scope.")
    name: str = Field(default="", max_length=200, description="What the key is for.")


@router.post(
    "",
    status_code=201,
    summary="Create a key; the key itself is in this answer only",
    response_model=None,
    responses=answers(CreatedKey, *ADMIN, status=201, description="Created."),
)
def create_key(body: KeyBody, response: Response, cl: CitelineDep, access: AdminDep) -> dict[str, Any]:
    try:
        info, key = cl.create_key(
            body.role, body.scopes, all_scopes=body.all_scopes, name=body.name, access=access
        )
    except InvalidRequestError as exc:
        raise field_named(exc, {"scopes": "body.scopes"}) from exc
    response.headers["Location"] = f"/keys/{info.id}"
    return {"key": key, **info.as_dict()}


@router.get(
    "/me",
    summary="The calling key's role and the scopes it may search (any key)",
    response_model=None,
    operation_id="get_my_key",
    responses=answers(MyKey, *KEYED),
)
def my_key(cl: CitelineDep, access: AccessDep) -> dict[str, Any]:
    return {
        "role": access.role.value,
        "all_scopes": access.scopes is None,
        "scopes": cl.scopes(access=access),
    }


@router.get(
    "",
    summary="The keys, without the keys themselves",
    response_model=None,
    responses=answers(KeyList, *ADMIN),
)
def list_keys(
    cl: CitelineDep, access: AdminDep, include_revoked: Annotated[bool, Query()] = False
) -> dict[str, Any]:
    return {"keys": [k.as_dict() for k in cl.api_keys(include_revoked=include_revoked, access=access)]}


@router.delete(
    "/{key_id}",
    summary="Revoke a key at once",
    response_model=None,
    responses=answers(Key, *ADMIN, 404),
)
def revoke_key(key_id: str, cl: CitelineDep, access: AdminDep) -> dict[str, Any]:
    return cl.revoke_key(key_id, access=access).as_dict()
