"""Request dependencies, as ``Annotated`` aliases: the library instance and the caller's grant.

``AccessDep`` turns ``Authorization: Bearer <key>`` into the key's :class:`Access` (401 otherwise) and
counts the request against the key's rate limit; ``AdminDep`` further refuses readers (403).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from citeline.access import Access
from citeline.api.limits import GenerationSlots, RateLimiter
from citeline.checks import NUL_MESSAGE, nul_at
from citeline.engine import Citeline
from citeline.errors import AccessDeniedError, AuthenticationError, InvalidRequestError

#: The grant of a request without a key to a server in open mode.
OPEN_ACCESS = Access.admin("open")

# auto_error=False: a missing header is answered by get_access in the API's own error shape.
_bearer = HTTPBearer(auto_error=False, description="An API key made by `citeline keys create`.")


# Dependencies that do no I/O are async: a sync one costs a trip through the thread pool per request.
async def get_citeline(request: Request) -> Citeline:
    cl: Citeline = request.app.state.citeline
    return cl


CitelineDep = Annotated[Citeline, Depends(get_citeline)]


async def get_slots(request: Request) -> GenerationSlots:
    slots: GenerationSlots = request.app.state.generation_slots
    return slots


SlotsDep = Annotated[GenerationSlots, Depends(get_slots)]


async def get_access(
    request: Request,
    cl: CitelineDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Access:
    """The grant of the request's API key; in open mode, a request without a key is an admin.

    A key the server checked moments ago is answered on the event loop; only a database read goes
    to the thread pool, so a busy key's requests skip a thread hop and a round trip.
    """
    limiter: RateLimiter = request.app.state.rate_limiter
    sent = request.headers.getlist("authorization")
    if len(sent) > 1:
        # Starlette reads the first; a proxy may read the last. Which key a request acts under must not
        # depend on who reads it: no key of the two is taken.
        raise InvalidRequestError(
            f"header.authorization: a request carries one Authorization header, this one carried {len(sent)}",
            http_status=400,
        )
    if credentials is None:
        if cl.settings.api_open:
            limiter.hit(OPEN_ACCESS.user_id)
            request.state.key_id = "open"  # for the access log (citeline.api.request_id.key_id)
            return OPEN_ACCESS
        if not await run_in_threadpool(cl.has_keys):
            raise AuthenticationError(
                "this server has no API keys yet: create one with `citeline keys create --role admin`, "
                "or start it with --open (loopback only) to try it without keys"
            )
        raise AuthenticationError("this request needs an API key: send `Authorization: Bearer <key>`")
    key = credentials.credentials
    info = cl.cached_key(key)
    if info is None:
        info = await run_in_threadpool(cl.authenticate, key)
    # The key's id, never the key, for the access log (citeline.api.request_id.key_id).
    request.state.key_id = str(info.id)
    access = info.access
    limiter.hit(access.user_id)
    return access


AccessDep = Annotated[Access, Depends(get_access)]


async def require_admin(access: AccessDep) -> Access:
    if not access.is_admin:
        raise AccessDeniedError(f"this needs an admin key (this key is a {access.role.value})")
    return access


AdminDep = Annotated[Access, Depends(require_admin)]


# The query parameter names each route takes, its sub-dependencies' included; filled on first use.
_query_names: dict[int, frozenset[str]] = {}


def _takes(route: Any) -> frozenset[str]:
    names = _query_names.get(id(route))
    if names is None:
        found: set[str] = set()
        pending = [route.dependant]
        while pending:
            dependant = pending.pop()
            found.update(field.alias for field in dependant.query_params)
            pending.extend(dependant.dependencies)
        names = _query_names[id(route)] = frozenset(found)
    return names


async def refuse_unknown_query(request: Request) -> None:
    """Refuse a query parameter the route does not take (422), as an unknown body field is refused: a
    misspelt filter (``?scopes=`` for ``?scope=``) must not silently widen a search."""
    route = request.scope.get("route")
    if not request.query_params or route is None:
        return
    known = _takes(route)
    takes = ", ".join(sorted(known)) or "none"
    unknown = [name for name in dict.fromkeys(request.query_params) if name not in known]
    if unknown:
        raise RequestValidationError(
            [
                {
                    "type": "extra_forbidden",
                    "loc": ("query", name),
                    "msg": f"unknown query parameter (this route takes: {takes})",
                    "input": request.query_params[name],
                }
                for name in unknown
            ]
        )


async def refuse_nul(request: Request) -> None:
    """Refuse a NUL character in a query parameter or a path segment (422), as in a body field
    (``citeline.api.bodies``), by the library's rule (:mod:`citeline.checks`), naming the parameter
    as the client sent it (``query.tag``), which the library, given only its value, could not."""
    given = (("path", request.path_params.items()), ("query", request.query_params.multi_items()))
    problems = [
        {"type": "nul_character", "loc": (where, name), "msg": NUL_MESSAGE, "input": value}
        for where, pairs in given
        for name, value in pairs
        if nul_at((name, value)) is not None
    ]
    if problems:
        raise RequestValidationError(problems)
