"""Changing documents (admin): upload or add a web page (``202``, built by the job runner), replace a
document in place, relabel, queue, re-ingest, cancel; and the knowledge-base seed's ``/index`` names.

Every action is one library call (:meth:`Citeline.submit`, :meth:`~Citeline.submit_url`,
:meth:`~Citeline.relabel`, :meth:`~Citeline.index`, :meth:`~Citeline.reingest`, :meth:`~Citeline.cancel`,
:meth:`~Citeline.refresh`);
these routes only read the request and shape the answer.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import anyio
from fastapi import APIRouter, Query, Request, Response
from pydantic import Field
from starlette.datastructures import UploadFile

from citeline.api.bodies import Count, Metadata, RequestBody, Scope, json_body
from citeline.api.deps import AdminDep, CitelineDep
from citeline.api.errors import field_named
from citeline.api.routes.documents import DocumentId, document_json
from citeline.api.schemas import (
    ADMIN,
    Document,
    DocumentVersions,
    IndexAll,
    Refresh,
    Submitted,
    answers,
    errors,
)
from citeline.checks import NUL_MESSAGE, nul_at
from citeline.errors import CitelineError, InvalidRequestError
from citeline.ingest import IngestOptions, Outcome
from citeline.jobs.submit import Refreshed, Submission, Upload, parse_age
from citeline.store.models import Status

router = APIRouter(tags=["documents"])
T = TypeVar("T")


class Labels(RequestBody):
    """A document's labels; a field left out keeps the document's current value."""

    scopes: list[Scope] | None = Field(default=None, description="Scopes; [] makes the document universal.")
    category: str | None = Field(default=None, description="Category path, e.g. Engineering/Security.")
    tags: list[str] | None = Field(default=None, description="Tags.")
    metadata: Metadata | None = Field(default=None, description="Filterable metadata labels (strings).")

    def options(self, chunk_size: int | None = None, chunk_overlap: int | None = None) -> IngestOptions:
        try:
            return IngestOptions(
                scopes=None if self.scopes is None else tuple(self.scopes),
                category=self.category,
                tags=None if self.tags is None else tuple(self.tags),
                metadata=self.metadata,
                chunk_size=chunk_size,
                chunk_overlap=chunk_overlap,
            )
        except InvalidRequestError as exc:
            raise field_named(exc, {name: f"body.{name}" for name in type(self).model_fields}) from exc


class UrlBody(Labels):
    url: str = Field(description="An http(s) web page; private and loopback addresses are refused.")
    chunk_size: Count | None = Field(default=None, ge=50, le=20_000)
    chunk_overlap: Count | None = Field(default=None, ge=0, le=10_000)
    document_id: uuid.UUID | None = Field(default=None, description="Replace this document.")
    index: bool = Field(default=True, description="False registers it pending, to index later.")


def _submitted(submission: Submission, response: Response) -> dict[str, Any]:
    doc = submission.document
    response.headers["Location"] = f"/documents/{doc.id}"
    response.status_code = 202 if submission.created else 200
    return {
        **document_json(doc),
        "outcome": str(submission.outcome),
        "same_content_as": [same.as_dict() for same in submission.same_content],
    }


#: An upload's form fields besides ``file``: those of a web page's JSON body but its ``url``, and the
#: ``source`` key it is sent under (a web page's source is its address).
_FORM_FIELDS = (frozenset(UrlBody.model_fields) - {"url"}) | {"source"}


def _split(values: list[str] | None, *, drop_blank: bool = True) -> list[str] | None:
    """Repeated form fields, or one comma-separated field, as a list (None when not given). Scopes keep
    their blank parts, for the library to refuse (retrieve.filters.check_scopes): dropped, an upload
    whose only scope is blank would become universal."""
    if values is None:
        return None
    parts = [part.strip() for value in values for part in value.split(",")]
    return [part for part in parts if part] if drop_blank else parts


@router.post(
    "/documents",
    status_code=202,
    summary="Upload a file (multipart) or add a web page (JSON {url}); built in the background",
    response_model=None,
    responses={
        202: {
            "model": Submitted,
            "description": "Registered and queued; poll GET /documents/{id} (Location).",
        },
        200: {
            "model": Submitted,
            "description": "An existing document (document_id, or the same source) replaced or relabelled, "
            "or unchanged.",
        },
        **errors(*ADMIN, 404, 409, 415),
    },
    # The body is read by hand (two content types), so FastAPI cannot see it: declared here.
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "multipart/form-data": {"schema": {"$ref": "#/components/schemas/UploadForm"}},
                "application/json": {"schema": {"$ref": "#/components/schemas/UrlBody"}},
            },
        }
    },
)
async def add_document(
    request: Request,
    response: Response,
    cl: CitelineDep,
    access: AdminDep,
) -> dict[str, Any]:
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("application/json"):
        body = await json_body(request, UrlBody)
        options = body.options(chunk_size=body.chunk_size, chunk_overlap=body.chunk_overlap)
        submission = await _run(
            cl.submit_url, body.url, options, access=access, document_id=body.document_id, index=body.index
        )
        return _submitted(submission, response)
    if not content_type.startswith("multipart/form-data"):
        raise InvalidRequestError(
            'POST /documents takes a multipart upload (a `file` field) or JSON {"url": ...}, '
            f"not {content_type or 'a body without a content type'}"
        )
    form = await request.form(max_files=1, max_fields=100)
    upload = form.get("file")
    # request.form() gives Starlette's UploadFile: FastAPI's is a subclass no parsed form holds.
    if not isinstance(upload, UploadFile) or not upload.filename:
        raise InvalidRequestError("the upload has no `file` field with a file name")
    fields = {key: [str(v) for v in form.getlist(key)] for key in form if key != "file"}
    unknown = sorted(set(fields) - _FORM_FIELDS)
    if unknown:
        # Refused as a JSON body's unknown field is: a misspelt `scope` would make the upload universal.
        raise InvalidRequestError(
            f"an upload takes no form field {', '.join(map(repr, unknown))}; "
            f"it takes file, {', '.join(sorted(_FORM_FIELDS))}"
        )
    for key, values in fields.items():
        if nul_at(values) is not None:
            raise InvalidRequestError(f"form field {key}: {NUL_MESSAGE}")
    try:
        options = IngestOptions(
            scopes=_tuple(_split(fields.get("scopes"), drop_blank=False)),
            category=_one(fields, "category"),
            tags=_tuple(_split(fields.get("tags"))),
            metadata=_metadata(_one(fields, "metadata")),
            chunk_size=_int(fields, "chunk_size"),
            chunk_overlap=_int(fields, "chunk_overlap"),
        )
    except InvalidRequestError as exc:
        raise field_named(exc, {name: f"form field {name}" for name in _FORM_FIELDS}) from exc
    index = _bool(fields, "index", default=True)
    target = _one(fields, "document_id")
    try:
        submission = await _run(
            cl.submit,
            Upload(_file_name(upload.filename), upload.file),
            options,
            access=access,
            document_id=target,
            source=_one(fields, "source"),
            index=index,
        )
    finally:
        await upload.close()
    return _submitted(submission, response)


@router.patch(
    "/documents/{document_id}",
    summary="Change a document's labels (no re-embedding)",
    response_model=None,
    operation_id="relabel_document",
    responses=answers(Document, *ADMIN, 404, 409),
)
async def relabel(document_id: DocumentId, body: Labels, cl: CitelineDep, access: AdminDep) -> dict[str, Any]:
    return document_json(await _run(cl.relabel, document_id, body.options(), access=access))


@router.get(
    "/documents/{document_id}/versions",
    summary="Every version the catalog holds, oldest first",
    response_model=None,
    operation_id="list_versions",
    responses=answers(DocumentVersions, *ADMIN, 404),
)
async def versions(document_id: DocumentId, cl: CitelineDep, access: AdminDep) -> dict[str, Any]:
    found = await _run(cl.versions, document_id, access=access)
    return {
        "document_id": str(found[0].id) if found else document_id,
        "versions": [document_json(v) for v in found],
    }


@router.post(
    "/documents/{document_id}/reingest",
    status_code=202,
    summary="Build a new version (202)",
    response_model=None,
    operation_id="reingest_document",
    responses={
        **answers(Submitted, *ADMIN, 404, 409, 415, status=202, description="Queued (Location)."),
        200: {"model": Submitted, "description": "Nothing to build: the source is unchanged."},
    },
)
async def reingest(
    document_id: DocumentId, response: Response, cl: CitelineDep, access: AdminDep
) -> dict[str, Any]:
    return _submitted(await _run(cl.reingest, document_id, access=access), response)


@router.post(
    "/documents/{document_id}/index",
    summary="Queue a pending document",
    response_model=None,
    operation_id="index_document",
    responses=answers(Document, *ADMIN, 404, 409),
)
@router.post(
    "/index/{document_id}",
    summary="Alias of POST /documents/{id}/index",
    response_model=None,
    operation_id="index_document_alias",
    responses=answers(Document, *ADMIN, 404, 409),
)
async def index(document_id: DocumentId, cl: CitelineDep, access: AdminDep) -> dict[str, Any]:
    return document_json(await _run(cl.index, document_id, access=access))


@router.post(
    "/documents/{document_id}/cancel",
    summary="Cancel a pending, queued or running job",
    response_model=None,
    operation_id="cancel_document",
    responses=answers(Document, *ADMIN, 404, 409),
)
async def cancel(document_id: DocumentId, cl: CitelineDep, access: AdminDep) -> dict[str, Any]:
    return document_json(await _run(cl.cancel, document_id, access=access))


@router.post(
    "/index-all",
    summary="Queue every document in a status; a summary per document",
    response_model=None,
    responses=answers(IndexAll, *ADMIN),
)
async def index_all(
    cl: CitelineDep,
    access: AdminDep,
    status: Annotated[Status, Query(description="pending (queue them) or completed/failed (re-ingest).")],
) -> dict[str, Any]:
    try:
        done = await _run(cl.index_all, status, access=access)
    except InvalidRequestError as exc:
        raise InvalidRequestError(f"query.status: {exc}") from None
    summary = [{"document_id": str(d.id), "name": d.name, "status": d.status} for d in done]
    return {"status": status.value, "documents": summary}


class RefreshBody(RequestBody):
    older_than: str | None = Field(
        default=None, description="Only sources last read longer ago than this: 30m, 12h, 1d, 2w."
    )
    document_ids: list[str] = Field(default_factory=list, description="Only these documents.")
    dry_run: bool = Field(default=False, description="List what would be read again; change nothing.")


@router.post(
    "/refresh",
    status_code=202,
    summary="Read web pages and files again; new versions if changed",
    response_model=None,
    operation_id="refresh_documents",
    responses=answers(Refresh, *ADMIN, 404, status=202, description="Read again (or, dry_run, listed)."),
)
async def refresh(cl: CitelineDep, access: AdminDep, body: RefreshBody | None = None) -> dict[str, Any]:
    # Every field has a default, so the body may be left out: all of it defaults.
    body = body or RefreshBody()
    try:
        # An empty age is refused, not taken for none: "older_than": "" read every source again.
        age = parse_age(body.older_than) if body.older_than is not None else None
    except InvalidRequestError as exc:
        raise InvalidRequestError(f"body.older_than: {exc}") from None
    docs = await _run(cl.refresh_candidates, older_than=age, document_ids=body.document_ids)
    if body.dry_run:
        # A named document refresh would refuse says why, as the real run would.
        listed = [{**document_json(d), "refresh_problem": cl.refresh_problem(d)} for d in docs]
        return {"dry_run": True, "documents": listed}

    def refresh_all() -> list[dict[str, Any]]:
        out = []
        for doc in docs:
            try:
                out.append(cl.refreshed(cl.refresh(doc.id, access=access), timeout=0).as_dict())
            except CitelineError as exc:
                out.append(Refreshed(doc, Outcome.FAILED, str(exc)).as_dict())
        return out

    return {"dry_run": False, "documents": await _run(refresh_all)}


async def _run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """A library call (which reads files and the database) off the event loop."""
    return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs))


def _one(fields: dict[str, list[str]], key: str) -> str | None:
    values = fields.get(key)
    return values[-1] if values else None


def _int(fields: dict[str, list[str]], key: str) -> int | None:
    value = _one(fields, key)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise InvalidRequestError(f"form field {key}: must be a whole number, got {value!r}") from None


_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _bool(fields: dict[str, list[str]], key: str, *, default: bool) -> bool:
    value = _one(fields, key)
    if value is None or value == "":
        return default
    if value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    # Read as true, `index=flase` would build a document the client meant to hold back.
    raise InvalidRequestError(f"form field {key}: must be true or false, got {value!r}")


def _file_name(sent: str) -> str:
    """The upload's file name as the user named it. Browsers send a double quote in a multipart file
    name as ``%22`` (the HTML standard's form encoding; Chromium and Firefox alike), and the form parser
    keeps it so: a file saved as ``"draft".txt`` would be listed as ``%22draft%22.txt``."""
    return sent.replace("%22", '"')


def _tuple(values: list[str] | None) -> tuple[str, ...] | None:
    return None if values is None else tuple(values)


def _metadata(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidRequestError(f"form field metadata: must be a JSON object: {exc}") from exc
    if not isinstance(value, dict):
        raise InvalidRequestError("form field metadata: must be a JSON object")
    where = nul_at(value, "metadata", dotted=True)
    if where is not None:
        raise InvalidRequestError(f"form field {where}: {NUL_MESSAGE}")
    return value  # its values are checked by the library (IngestOptions), as every shell's are
