"""Reading documents: ``GET /documents`` (filtered, paged), one document, its file, a page's text, its
chunks, the builds in progress (``GET /builds``); and ``DELETE /documents/{id}`` (alias
``DELETE /index/{id}``, the knowledge-base seed's name)."""

from __future__ import annotations

import os
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Path, Query
from fastapi.responses import FileResponse, JSONResponse, Response
from starlette.datastructures import Headers
from starlette.responses import MalformedRangeHeader, RangeNotSatisfiable
from starlette.types import Receive, Scope, Send

from citeline.api.deps import AccessDep, AdminDep, CitelineDep
from citeline.api.errors import error_body, field_named
from citeline.api.head import HEAD_ASKED
from citeline.api.routes.links import file_url
from citeline.api.schemas import (
    ADMIN,
    KEYED,
    BuildList,
    ChunkList,
    Deleted,
    Document,
    DocumentList,
    PageText,
    answers,
    stored_file,
)
from citeline.errors import InvalidRequestError
from citeline.jobs.submit import parse_age
from citeline.store.catalog import DocumentInfo, DocumentQuery
from citeline.store.models import Status

router = APIRouter(tags=["documents"])

#: The largest offset the database takes (a bigint): a larger one is a 422, not the database's error.
MAX_OFFSET = 2**63 - 1
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET)]

DocumentId = Annotated[str, Path(description="A document id, or an unambiguous prefix of one.")]
Version = Annotated[
    int | None,
    Query(
        ge=1,
        description="This version instead of the current one (a citation's; a replaced version is kept "
        "while a conversation cites it).",
    ),
]


def document_json(doc: DocumentInfo) -> dict[str, Any]:
    """A document as the API shows it: the catalog's fields, with a link to the file instead of the
    server path where it is stored."""
    out = doc.as_dict()
    out.pop("file_path")
    out["file_url"] = (
        file_url(doc.id, version=None if doc.is_active else doc.version) if doc.file_path else None
    )
    return out


@router.get(
    "/documents",
    summary="Documents the key sees, filtered and paged, with the total count",
    response_model=None,
    responses=answers(DocumentList, *KEYED),
)
def list_documents(
    cl: CitelineDep,
    access: AccessDep,
    status: Annotated[Status | None, Query(description="Only documents in this status.")] = None,
    scope: Annotated[
        list[str] | None,
        Query(description="Repeatable, as on /search: only documents carrying any of these scopes."),
    ] = None,
    category: Annotated[str | None, Query(description="This category or any below it.")] = None,
    tag: Annotated[str | None, Query(description="Only documents with this tag.")] = None,
    content_type: Annotated[
        str | None,
        Query(description="As stored (`application/pdf`) or as `docs list` shows it (`pdf`, `csv`, `text`)."),
    ] = None,
    name_contains: Annotated[str | None, Query(description="Case-insensitive part of the name.")] = None,
    source: Annotated[
        str | None, Query(description="The document uploaded under this key (the upload's `source`).")
    ] = None,
    source_prefix: Annotated[
        str | None,
        Query(
            description="The documents uploaded under keys starting with this, taken literally "
            "(one synced folder's: `handbook/`); empty, every document uploaded under a key."
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    offset: Offset = 0,
) -> dict[str, Any]:
    try:
        query = DocumentQuery(
            status=status.value if status else None,
            scopes=tuple(scope) if scope else None,
            category=category,
            tag=tag,
            content_type=content_type,
            name_contains=name_contains,
            source=source,
            source_prefix=source_prefix,
            limit=limit,
            offset=offset,
        )
    except InvalidRequestError as exc:
        raise field_named(exc, {"content_type": "query.content_type", "scopes": "query.scope"}) from exc
    page = cl.list_documents(query, access=access)
    return {
        "documents": [document_json(d) for d in page.documents],
        "total": page.total,
        "limit": page.limit,
        "offset": page.offset,
    }


@router.get(
    "/builds",
    summary="Versions queued or being built (and lately failed), whoever started them",
    response_model=None,
    responses=answers(BuildList, *KEYED),
)
def list_builds(
    cl: CitelineDep,
    access: AccessDep,
    failed_within: Annotated[
        str | None,
        Query(description="Also the builds that failed this recently: 30m, 12h, 1d, 2w."),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    offset: Offset = 0,
) -> dict[str, Any]:
    try:
        age = parse_age(failed_within) if failed_within is not None else None
    except InvalidRequestError as exc:
        raise InvalidRequestError(f"query.failed_within: {exc}") from None
    page = cl.builds(failed_within=age, limit=limit, offset=offset, access=access)
    return {
        "builds": [b.as_dict() for b in page.builds],
        "total": page.total,
        "limit": page.limit,
        "offset": page.offset,
    }


@router.get(
    "/documents/{document_id}",
    summary="One document: status, labels, counts, source metadata",
    response_model=None,
    responses=answers(Document, *KEYED, 404),
)
def get_document(
    document_id: DocumentId, cl: CitelineDep, access: AccessDep, version: Version = None
) -> dict[str, Any]:
    return document_json(cl.document(document_id, access=access, version=version))


#: An uploaded original is anyone's bytes served inline on the pages' origin, whose session storage
#: holds the signed-in key: an HTML page with a script must not run as that origin (``sandbox``: no
#: scripts, a unique origin) nor a file be read by the browser as another type than it is served as.
ORIGINAL_HEADERS = {"Content-Security-Policy": "sandbox", "X-Content-Type-Options": "nosniff"}


#: A stored original may be cached, by the client only (it is read with a key), and revalidated before
#: each use: a version's file never changes, but which version a URL without ``version`` opens does.
FILE_CACHE_CONTROL = "private, no-cache"


def _etag_matches(if_none_match: str, etag: str) -> bool:
    """Whether an ``If-None-Match`` header names ``etag`` (weakly compared, as RFC 9110 asks for it)."""
    if if_none_match.strip() == "*":
        return True
    own = etag.removeprefix("W/")
    return any(tag.strip().removeprefix("W/") == own for tag in if_none_match.split(","))


class StoredFile(FileResponse):
    """A stored original: Starlette's file response, whose refusals of a ``Range`` header (plain text
    there) have the API's error shape: a malformed one is a 422, one past the end a 416. A client that
    holds the file already (``If-None-Match`` naming its ETag) gets a 304 without it."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get(HEAD_ASKED):
            # A HEAD served by this GET route: Starlette sends the headers only, the file left unread.
            scope = {**scope, "method": "HEAD"}
        headers = Headers(scope=scope)
        self.headers.setdefault("cache-control", FILE_CACHE_CONTROL)
        if_none_match, asked = headers.get("if-none-match"), headers.get("range")
        answering = self.status_code == 200 and scope["method"].upper() in ("GET", "HEAD")
        if answering and (if_none_match is not None or asked is not None) and self.stat_result is None:
            # The file's size and ETag, which both checks below read, from one stat.
            self.stat_result = await anyio.to_thread.run_sync(os.stat, self.path)
            self.set_stat_headers(self.stat_result)
        if answering and if_none_match is not None and _etag_matches(if_none_match, self.headers["etag"]):
            kept = {k: v for k, v in self.headers.items() if k in ("etag", "last-modified", "cache-control")}
            await Response(status_code=304, headers=kept)(scope, receive, send)
            return
        if answering and asked is not None:
            assert self.stat_result is not None
            if_range = headers.get("if-range")
            size = self.stat_result.st_size
            refused: JSONResponse | None = None
            try:
                if if_range is None or self._should_use_range(if_range):
                    self._parse_range_header(asked, size)
            except MalformedRangeHeader as exc:
                refused = JSONResponse(error_body("invalid_request", f"header.range: {exc.content}"), 422)
            except RangeNotSatisfiable:
                refused = JSONResponse(
                    error_body("range_not_satisfiable", f"range {asked!r} is past the file's {size} bytes"),
                    416,
                    headers={"Content-Range": f"bytes */{size}"},
                )
            if refused is not None:
                await refused(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


@router.get(
    "/documents/{document_id}/file",
    summary="The stored original, with its content type (supports HTTP range requests)",
    response_class=FileResponse,
    operation_id="get_document_file",
    responses=stored_file(*KEYED, 404, 416),
)
def get_file(
    document_id: DocumentId, cl: CitelineDep, access: AccessDep, version: Version = None
) -> StoredFile:
    doc = cl.document(document_id, access=access, version=version)
    path = cl.document_file(doc, access=access)
    return StoredFile(
        path,
        media_type=doc.content_type or "application/octet-stream",
        filename=doc.name,
        content_disposition_type="inline",
        headers=ORIGINAL_HEADERS,
    )


@router.get(
    "/documents/{document_id}/pages/{page}",
    summary="A page's text, rebuilt from its chunks",
    response_model=None,
    responses=answers(PageText, *KEYED, 404),
)
def get_page(
    document_id: DocumentId,
    page: Annotated[int, Path(ge=1, description="1-based page number.")],
    cl: CitelineDep,
    access: AccessDep,
    version: Version = None,
) -> dict[str, Any]:
    doc = cl.document(document_id, access=access, version=version)
    return {
        "document_id": str(doc.id),
        "version": doc.version,
        "page": page,
        "text": cl.page_text(doc, page, access=access),
    }


@router.get(
    "/documents/{document_id}/chunks",
    summary="A document's chunks, in order, paged",
    response_model=None,
    operation_id="list_chunks",
    responses=answers(ChunkList, *KEYED, 404),
)
def get_chunks(
    document_id: DocumentId,
    cl: CitelineDep,
    access: AccessDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Offset = 0,
    version: Version = None,
) -> dict[str, Any]:
    doc = cl.document(document_id, access=access, version=version)
    rows, total = cl.chunk_page(doc, offset=offset, limit=limit, access=access)
    chunks = [
        {
            "chunk_id": r["id"],
            "index": r["chunk_index"],
            "page": r["page"],
            "start": r["start_offset"],
            "end": r["end_offset"],
            "section": r["section"],
            "section_type": r["section_type"],
            "model_numbers": r["model_numbers"],
            "context": r["context"],
            "rows": r["rows"],
            "text": r["text"],
        }
        for r in rows
    ]
    return {"document_id": str(doc.id), "chunks": chunks, "total": total, "limit": limit, "offset": offset}


@router.delete(
    "/documents/{document_id}",
    summary="Delete a document with every version (admin)",
    response_model=None,
    responses=answers(Deleted, *ADMIN, 404, 409),
)
@router.delete(
    "/index/{document_id}",
    summary="Alias of DELETE /documents/{id}",
    response_model=None,
    operation_id="delete_document_alias",
    responses=answers(Deleted, *ADMIN, 404, 409),
)
def delete_document(document_id: DocumentId, cl: CitelineDep, access: AdminDep) -> dict[str, Any]:
    removed = cl.delete(document_id, access=access)
    # One entry per document, however many versions it had (a model migration stages a second one).
    return {
        "deleted": list(dict.fromkeys(str(d.id) for d in removed)),
        "versions": len(removed),
        "name": removed[0].name if removed else None,
    }
