"""What the API answers, as OpenAPI describes it: the success bodies of every route, the one error
body, and the events of the answer stream.

These models describe; they do not build. The routes return plain JSON (dicts the library's
``as_dict()`` gives, rendered by :mod:`citeline.api.responses` on the hot paths), and each route names
its bodies here through ``responses=``, which documents a status without validating the response: a
search pays nothing for its schema. ``tests/api/test_openapi_contract.py`` keeps the two honest: it
calls every route and checks each real answer against the schema ``/openapi.json`` declares for its
status, every field the server sends included.

An object's schema leaves ``additionalProperties`` open, so a client generated from it keeps working
when a later server adds a field; the contract test closes every object, so the server cannot send a
field this module does not declare.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Annotated, Any, Literal, get_args

from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic.json_schema import models_json_schema

from citeline.load import CONTENT_TYPES
from citeline.settings import Persona

#: A persona's name as a request gives it. Checked by the library (``ChatSession.start``), whose 422
#: names the unknown persona; the schema lists the closed set, ``citeline.settings.Persona``.
PersonaName = Annotated[str, WithJsonSchema({"type": "string", "enum": list(get_args(Persona))})]

Timestamp = datetime


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


def absent_or(description: str) -> Any:
    """A field a body may leave out, never null: its schema has no default (pydantic's would be null)."""
    return Field(default=None, json_schema_extra=_no_default, description=description)


class Described(BaseModel):
    """A response body: documented, never used to validate what a route returns."""


class Open(Described):
    """A body whose fields depend on the deployment (checks, counts): any further field is allowed."""

    model_config = ConfigDict(extra="allow")


# --- errors ---------------------------------------------------------------------------------------


class ErrorDetail(Described):
    code: str = Field(
        description="The error's kind in snake case: invalid_request, authentication, access_denied, "
        "not_found, conflict, limit_exceeded, unsupported_type, range_not_satisfiable, store, internal, ..."
    )
    message: str = Field(description="What went wrong, for which request or document, and what to do.")
    request_id: str = absent_or(
        "The request's id (also the X-Request-ID header and the server's log lines). Absent from a 400 "
        "or 431 the server sends before the request reaches the application."
    )


class ErrorBody(Described):
    """Every answer that is not a success."""

    error: ErrorDetail


#: Each error status the API answers, and when.
ERROR_STATUSES: dict[int, str] = {
    400: "Not an HTTP request the server can read (refused before the application: no request_id).",
    401: "No API key, or one that is unknown or revoked.",
    403: "The key may not do this (a reader key on an admin route, or a document outside its scopes).",
    404: "No such document, version, page, conversation or key (within the key's grant).",
    409: "The request conflicts with the document's state (already built, not cancellable, ...).",
    413: "The body (or the upload) is over the server's limit.",
    414: "The URL is over the server's limit.",
    415: "An upload of a type citeline cannot read.",
    416: "A Range past the end of the file.",
    422: "A field, parameter or header the route does not take, or a value it refuses (named in message).",
    429: "The key's rate limit: wait for Retry-After seconds.",
    431: "The request's headers are over the server's limit (refused before the application: no request_id).",
    500: "A bug: the server log has the stack trace, under the request_id.",
    502: "The answering model failed.",
    503: "A service is out of reach (database, vector store, embedder), or every answer slot is busy "
    "(Retry-After).",
}

#: What any request can be answered, whatever its route: refused before routing or by the shared checks.
EVERY_ROUTE = (400, 413, 414, 422, 431, 500)
#: What a route that needs a key adds.
KEYED = (*EVERY_ROUTE, 401, 429, 503)
#: What an admin route adds.
ADMIN = (*KEYED, 403)


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries declaring ``statuses`` as :class:`ErrorBody`, in status order.

    The schema is named, not given as ``model``: FastAPI would declare a model in the route's own
    media type, and the answer stream's errors are JSON, not events."""
    content = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    return {
        status: {"description": ERROR_STATUSES[status], "content": content}
        for status in sorted(set(statuses))
    }


def answers(
    model: type[BaseModel] | None, *statuses: int, status: int = 200, description: str = "Success."
) -> dict[int | str, dict[str, Any]]:
    """A route's ``responses=``: its success body ``model`` at ``status``, and ``statuses`` as errors."""
    success: dict[str, Any] = {"description": description}
    if model is not None:
        success["model"] = model
    return {status: success, **errors(*statuses)}


# --- search ---------------------------------------------------------------------------------------


class _Copy(Described):
    """Another stored copy of a passage, word for word: which chunk of which version, at which page."""

    chunk_id: int
    document_id: uuid.UUID
    document_name: str
    version: int
    page: int
    has_original: bool


class CopyLink(_Copy):
    """Another stored copy of a passage, word for word, and where it opens."""

    url: str = Field(description="Where the copy opens: its original at the page, or the page's text.")


class SearchResult(Described):
    document_id: uuid.UUID
    document_name: str
    title: str | None
    version: int
    content_type: str | None
    chunk_id: int
    chunk_index: int
    page: int
    rows: list[int] | None = Field(description="First and last row of a CSV's chunk, else null.")
    start: int = Field(description="Offset of the passage in the page's text (GET .../pages/{n}).")
    end: int
    section: str | None
    section_type: str | None
    model_numbers: list[str]
    context: str | None
    text: str
    distance: float
    similarity: float
    relevance: float = Field(description="1 / (1 + distance).")
    keyword_score: float
    fused_score: float
    rerank_score: float | None
    url: str = Field(description="Where the passage opens: the original at its page, or the page's text.")
    has_original: bool
    source_url: str | None
    also_in: list[CopyLink]


class MigrationProgress(Described):
    """A model migration under way: searches run in the old model's space meanwhile."""

    source_model: str
    target_model: str
    done: int
    total: int


class SearchResponse(Described):
    query: str
    count: int
    results: list[SearchResult]
    migration: MigrationProgress = absent_or("Only during a model migration.")


# --- documents ------------------------------------------------------------------------------------


class Document(Described):
    """One version of a document (the current one unless asked for another)."""

    id: uuid.UUID = Field(description="The document's id, the same across its versions.")
    version_id: uuid.UUID
    name: str
    title: str | None
    source_uri: str
    source: str | None = Field(description="The key it was uploaded under, else null.")
    content_type: str | None
    content_hash: str | None
    version: int
    is_active: bool
    status: str = Field(description="pending, queued, processing, completed, failed, staged or superseded.")
    error: str | None
    duration_ms: float | None
    processed_at: Timestamp | None
    page_count: int | None
    vector_count: int
    embedding_model: str | None
    chunk_size: int | None
    chunk_overlap: int | None
    category: str | None
    tags: list[str]
    scopes: list[str]
    metadata: dict[str, Any]
    uploaded_by: str | None
    added_at: Timestamp = absent_or("When the document was first added: the same on every version.")
    created_at: Timestamp
    updated_at: Timestamp
    source_metadata: dict[str, Any]
    attempts: int
    queued_at: Timestamp | None
    started_at: Timestamp | None
    last_fetched_at: Timestamp | None
    vector_index: str
    reingestable: bool
    file_url: str | None


class DocumentList(Described):
    documents: list[Document]
    total: int
    limit: int
    offset: int


class SameContent(Described):
    document_id: uuid.UUID
    name: str
    scopes: list[str]


class Submitted(Document):
    """A document registered by an upload, a web page or a re-ingest."""

    outcome: str = Field(description="added, updated, unchanged, relabelled, queued, ... (what was done).")
    same_content_as: list[SameContent] = Field(description="Other documents holding the same bytes.")


class DocumentVersions(Described):
    document_id: str
    versions: list[Document]


class Build(Described):
    document_id: uuid.UUID
    version_id: uuid.UUID
    name: str
    title: str | None
    source_uri: str
    version: int
    status: str
    current_version: int | None
    embedding_model: str | None
    migration: bool
    attempts: int
    queued_at: Timestamp | None
    started_at: Timestamp | None
    finished_at: Timestamp | None
    error: str | None
    cancel_requested: bool
    scopes: list[str]


class BuildList(Described):
    builds: list[Build]
    total: int
    limit: int | None
    offset: int


class PageText(Described):
    document_id: uuid.UUID
    version: int
    page: int
    text: str


class Chunk(Described):
    chunk_id: int
    index: int
    page: int
    start: int
    end: int
    section: str | None
    section_type: str | None
    model_numbers: list[str]
    context: str | None
    rows: list[int] | None
    text: str


class ChunkList(Described):
    document_id: uuid.UUID
    chunks: list[Chunk]
    total: int
    limit: int
    offset: int


class Deleted(Described):
    deleted: list[uuid.UUID] = Field(description="The document deleted (one entry, however many versions).")
    versions: int
    name: str | None


class IndexedDocument(Described):
    document_id: uuid.UUID
    name: str
    status: str


class IndexAll(Described):
    status: str
    documents: list[IndexedDocument]


class RefreshCandidate(Document):
    refresh_problem: str | None = Field(description="Why refreshing it would be refused, else null.")


class RefreshedDocument(Described):
    document_id: uuid.UUID
    name: str
    source_uri: str
    outcome: str = Field(description="updated, unchanged, failed or queued.")
    version: int
    last_fetched_at: Timestamp | None
    error: str | None


class Refresh(Described):
    """With ``dry_run``, what would be read again; else what reading it again did."""

    dry_run: bool
    documents: list[RefreshCandidate] | list[RefreshedDocument]


def stored_file(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` of the stored-file route: the original in its content type, whole or a range."""
    content = {
        media: {"schema": {"type": "string", "format": "binary"}}
        for media in (*CONTENT_TYPES, "application/octet-stream")
    }
    return {
        200: {
            "description": "The stored original, in the content type it was stored with.",
            "content": content,
        },
        206: {
            "description": "The part a Range header asked for (Content-Range says which).",
            "content": content,
        },
        **errors(*statuses),
    }


# --- the upload -------------------------------------------------------------------------------------


class UploadForm(Described):
    """``POST /documents`` as a multipart upload: the file and its labels as form fields."""

    file: bytes = Field(json_schema_extra={"format": "binary"}, description="The file, with its name.")
    scopes: str | None = Field(default=None, description="Comma-separated or repeated; none: universal.")
    category: str | None = None
    tags: str | None = Field(default=None, description="Comma-separated or repeated.")
    metadata: str | None = Field(default=None, description='A JSON object of strings: {"year": "2024"}.')
    chunk_size: int | None = None
    chunk_overlap: int | None = None
    document_id: uuid.UUID | None = Field(default=None, description="Replace this document.")
    source: str | None = Field(default=None, description="The key to keep the document under (sync).")
    index: bool = Field(default=True, description="false registers it pending, to index later.")


# --- conversations and answers --------------------------------------------------------------------


class Conversation(Described):
    id: uuid.UUID
    user_id: str
    title: str | None
    persona: str
    created_at: Timestamp
    updated_at: Timestamp
    expires_at: Timestamp


class ConversationList(Described):
    conversations: list[Conversation]


class StoredCitation(Open):
    """A citation of a stored answer: the passage as it is now (``available`` false once it is gone)."""

    number: int
    chunk_id: int
    available: bool
    download_url: str | None = None


class Message(Described):
    id: int
    conversation_id: uuid.UUID
    turn: int
    role: Literal["user", "assistant"]
    content: str
    standalone_query: str | None
    cited_chunk_ids: list[int]
    provider: str | None
    created_at: Timestamp
    citations: list[StoredCitation]
    unsupported: list[Any]
    evidence_missing: bool


class ConversationWithMessages(Conversation):
    messages: list[Message]


class CitedCopy(_Copy):
    download_url: str


class _Located(Described):
    """Where a passage of a chat's answer is: its chunk, document version, page, rows and characters,
    and how to open it (the fields the evidence, the cited passages and the citations share)."""

    chunk_id: int
    document_id: uuid.UUID
    document_name: str
    title: str | None
    version: int
    page: int
    rows: list[int] | None
    start: int
    end: int
    also_in: list[CitedCopy]
    has_original: bool
    source_url: str | None
    download_url: str


class EvidencePassage(_Located):
    """A passage the answer is given, numbered for the turn."""

    number: int
    truncated: bool
    shown: list[list[int]] | None = Field(description="What the model read, as [start, end] page spans.")


class CitedPassage(_Located):
    text: str


class Citation(_Located):
    number: int
    section: str | None
    excerpt: str
    excerpt_start: int
    excerpt_end: int
    score: float
    supported: bool
    attributed: bool
    stance: str


class RemovedCitation(Described):
    number: int
    occurrences: int
    reason: str


class Unsupported(Described):
    text: str
    numbers: list[int]
    score: float


class AnswerTimings(Described):
    prompt: float
    first_token: float | None
    generation: float
    verify: float
    total: float


class Complete(Described):
    """The finished answer (the stream's ``complete`` event)."""

    conversation_id: uuid.UUID
    answer: str
    claim: str | None
    verdict: str | None
    citations: list[Citation]
    removed: list[RemovedCitation]
    unsupported: list[Unsupported]
    uncited: list[str]
    provider: str
    fell_back: bool
    fallback_reason: str | None
    stream_replaced: bool
    evidence_missing: bool
    timings_ms: AnswerTimings


class ChatAnswer(Complete):
    """``POST /chat``: the ``complete`` event, the query searched and the passages given."""

    query: str
    sources: list[EvidencePassage]


# --- the answer stream's events -------------------------------------------------------------------


class StartEvent(Described):
    conversation_id: uuid.UUID
    turn: int
    question: str


class RewriteEvent(Described):
    question: str
    query: str
    method: str
    rewritten: bool
    fell_back: bool


class EvidenceEvent(Described):
    provider: str
    passages: list[EvidencePassage]


class TokenEvent(Described):
    text: str


class CitationEvent(Described):
    number: int
    stance: str
    passage: CitedPassage | None = Field(description="Null when an earlier turn cited the passage already.")


class ErrorEvent(Described):
    code: str
    message: str
    status: int
    request_id: str = absent_or("The request's id, as an error response gives it.")


#: The events of ``POST /chat/stream`` in the order they come, by SSE event name.
SSE_EVENTS: dict[str, tuple[type[BaseModel], str]] = {
    "start": (StartEvent, "The turn begins: its conversation and number."),
    "rewrite": (RewriteEvent, "How the question became the search query (a follow-up is rewritten)."),
    "evidence": (EvidenceEvent, "The passages the answer is given, numbered."),
    "token": (TokenEvent, "A piece of the answer's text (many)."),
    "citation": (CitationEvent, "A citation number, the first time it appears in the text."),
    "unsupported": (Unsupported, "A cited sentence its passages do not back."),
    "complete": (Complete, "The finished, checked answer: the last event."),
    "error": (ErrorEvent, "The answer failed after it started: the last event."),
}


def sse_description() -> str:
    """The stream's response description: its events, and the heartbeat."""
    lines = [
        "A text/event-stream of `event: <name>` / `data: <JSON>` pairs, in this order. Each payload's "
        "schema is under `x-events` (a component schema per event). A comment line `: heartbeat` comes "
        "every CITELINE_API_HEARTBEAT_SECONDS the model is silent.",
        "",
    ]
    lines += [f"- `{name}`: {text} ({model.__name__})" for name, (model, text) in SSE_EVENTS.items()]
    return "\n".join(lines)


# --- keys, stats, health --------------------------------------------------------------------------


class Key(Described):
    id: uuid.UUID
    name: str
    role: Literal["admin", "reader"]
    scopes: list[str] | None = Field(description="A reader's scopes; null: every scope.")
    all_scopes: bool = Field(description="Whether the key reaches every scope: an admin, a reader of all.")
    prefix: str
    created_at: Timestamp
    last_used_at: Timestamp | None
    revoked_at: Timestamp | None


class CreatedKey(Key):
    key: str = Field(description="The key itself, shown in this answer only.")


class KeyList(Described):
    keys: list[Key]


class MyKey(Described):
    role: Literal["admin", "reader"]
    all_scopes: bool
    scopes: list[str]


class Stats(Open):
    """``citeline stats --json`` as far as the key sees; admins get more (database size, postings)."""

    namespace: str
    embedding_model: str | None
    mode: Literal["embedded", "external"]


class Live(Described):
    status: Literal["live"]


class Generations(Described):
    running: int
    waiting: int
    started: int
    finished: int
    stopped_early: int


class Readiness(Open):
    """Each check by name (database, embedder, job_runner, vector_index): true or false."""

    status: Literal["ready", "not ready"]
    generations: Generations
    problems: dict[str, str] = absent_or("Why, by check; only when one failed.")


# --- completing the document ----------------------------------------------------------------------


def operation_id(route: APIRoute) -> str:
    """A route's operationId: its function's name (``list_documents``), which a generated client
    makes its method's name; routes that share a function name theirs (``operation_id=``)."""
    return route.name


def complete(spec: dict[str, Any], extra_models: Iterable[type[BaseModel]]) -> dict[str, Any]:
    """``spec`` as FastAPI made it, completed with what it cannot say from the routes: the schemas of
    ``extra_models`` (bodies a route reads by hand) and of the stream's events, and the ``HEAD`` of
    every ``GET`` (served by :class:`citeline.api.head.HeadAsGet`)."""
    models: Sequence[type[BaseModel]] = [ErrorBody, *extra_models, *(m for m, _ in SSE_EVENTS.values())]
    _, found = models_json_schema(
        [(m, "validation") for m in models], ref_template="#/components/schemas/{model}"
    )
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    for name, schema in found.get("$defs", {}).items():
        schemas.setdefault(name, schema)
    for path_item in spec.get("paths", {}).values():
        get = path_item.get("get")
        if get is None or "head" in path_item:
            continue
        head = {key: value for key, value in get.items() if key != "responses"}
        head["operationId"] = f"{get['operationId']}_head"
        head["summary"] = f"{get.get('summary', '')} (headers only)".strip()
        head["responses"] = {
            status: {key: value for key, value in response.items() if key != "content"}
            for status, response in get["responses"].items()
        }
        path_item["head"] = head
    return spec
