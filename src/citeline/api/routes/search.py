"""``POST /search`` (every knob) and ``GET /search?q=`` (the common ones): hybrid search within the
caller's grant."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import AliasChoices, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from citeline.access import Access
from citeline.annotate import SectionType
from citeline.api.bodies import Count, Metadata, Number, RequestBody, Scope, Text
from citeline.api.deps import AccessDep, CitelineDep
from citeline.api.errors import field_named
from citeline.api.limits import check_text_length
from citeline.api.responses import FastJSONResponse
from citeline.api.routes.links import passage_url
from citeline.api.schemas import KEYED, SearchResponse, answers
from citeline.engine import Citeline
from citeline.errors import InvalidRequestError
from citeline.retrieve.filters import Filters
from citeline.retrieve.search import Hit, SearchRequest
from citeline.settings import Fusion

router = APIRouter(tags=["search"])

#: The filters' fields as a body names them, for the library's refusals (see ``field_named``). Its
#: ``tags`` are a body's ``tags`` and ``tags_all`` together.
_BODY_FILTERS = {
    "scopes": "body.scopes",
    "category": "body.category",
    "tags": "body.tags or body.tags_all",
    "content_types": "body.content_types",
    "metadata": "body.metadata",
}


class FilterFields(RequestBody):
    """The filters shared by search and chat; each narrows, none widens the caller's grant."""

    scopes: list[Scope] | None = Field(
        default=None, description="Documents in these scopes (or universal); within the key's scopes."
    )
    category: str | None = Field(default=None, description="This category or any below it.")
    tags: list[str] = Field(default_factory=list, description="Documents with any of these tags.")
    tags_all: list[str] = Field(default_factory=list, description="Documents with all of these tags.")
    content_types: list[str] = Field(
        default_factory=list, description="pdf, text, markdown, html, csv, or as stored (application/pdf)."
    )
    document_ids: list[str] = Field(
        default_factory=list,
        description="Only these documents: whole ids, or unambiguous prefixes as GET /documents/{id} takes.",
    )
    metadata: Metadata = Field(default_factory=dict, description="Metadata values that must match (strings).")
    model_numbers: list[str] = Field(
        default_factory=list, description="Chunks naming any of these model numbers (XR-200 = xr200)."
    )
    section_types: list[SectionType] = Field(
        default_factory=list, description="Chunks of any of these section types."
    )

    def filters(self, cl: Citeline, access: Access) -> Filters:
        """The filters, with document id prefixes resolved within ``access`` (a read of the catalog)."""
        document_ids = cl.document_ids(self.document_ids, access=access)
        try:
            return Filters(
                scopes=None if self.scopes is None else tuple(self.scopes),
                category=self.category,
                tags_any=tuple(self.tags),
                tags_all=tuple(self.tags_all),
                document_ids=document_ids,
                content_types=tuple(self.content_types),
                metadata=self.metadata,
                model_numbers=tuple(self.model_numbers),
                section_types=tuple(t.value for t in self.section_types),
            )
        except InvalidRequestError as exc:
            raise field_named(exc, _BODY_FILTERS) from exc


def _n_results_in_schema(schema: dict[str, Any]) -> None:
    # top_k's other name (validation_alias) is taken but not shown: a generated client, and a strict
    # one's additionalProperties check, must know it.
    properties = schema["properties"]
    properties["n_results"] = {**properties["top_k"], "description": "Another name for top_k; send one."}


class SearchBody(FilterFields):
    query: Text = Field(min_length=1, description="What to search for.")
    top_k: Count | None = Field(
        default=None,
        ge=1,
        le=1000,
        validation_alias=AliasChoices("top_k", "n_results"),
        description="How many results (also accepted as n_results); default: the top_k setting.",
    )
    distance_threshold: Number | None = Field(
        default=None, ge=0, le=2, description="Largest cosine distance."
    )
    fusion: Fusion | None = Field(default=None, description="rrf, weighted or dbsf.")
    candidates: Count | None = Field(default=None, ge=1, le=10_000, description="Candidates per ranking.")
    rerank: str | None = Field(
        default=None,
        description="none, prf, maxsim or cross-encoder:<folder> (a reranker's name; plugins add more).",
        examples=["prf"],
    )
    mmr_lambda: Number | None = Field(default=None, ge=0, le=1, description="Maximal marginal relevance.")

    model_config = ConfigDict(json_schema_extra=_n_results_in_schema)

    @model_validator(mode="before")
    @classmethod
    def _one_top_k(cls, data: Any) -> Any:
        # Both names given: pydantic takes top_k and calls n_results an extra input, as if it were not
        # taken at all. The same count twice is one setting, said twice; two counts are a mistake.
        if isinstance(data, dict) and "top_k" in data and "n_results" in data:
            if data["top_k"] != data["n_results"]:
                raise PydanticCustomError(
                    "top_k_twice",
                    "top_k and n_results are one setting (n_results is another name for top_k), "
                    "given {top_k} and {n_results}; send one",
                    {"top_k": data["top_k"], "n_results": data["n_results"]},
                )
            data = {key: value for key, value in data.items() if key != "n_results"}
        return data


def result(hit: Hit) -> dict[str, Any]:
    """One search result as the API returns it (see docs/api.md)."""
    return {
        "document_id": str(hit.document_id),
        "document_name": hit.document_name,
        "title": hit.title,
        "version": hit.version,
        "content_type": hit.content_type,
        "chunk_id": hit.chunk_id,
        "chunk_index": hit.chunk_index,
        "page": hit.page,
        "rows": None if hit.rows is None else list(hit.rows),
        "start": hit.start,
        "end": hit.end,
        "section": hit.section,
        "section_type": hit.section_type,
        "model_numbers": list(hit.model_numbers),
        "context": hit.context,
        "text": hit.text,
        "distance": hit.distance,
        "similarity": hit.similarity,
        "relevance": 1.0 / (1.0 + hit.distance),
        "keyword_score": hit.keyword_score,
        "fused_score": hit.fused_score,
        "rerank_score": hit.rerank_score,
        "url": passage_url(hit.document_id, hit.page, has_original=hit.has_original),
        "has_original": hit.has_original,
        "source_url": hit.source_url,
        # The same passage, word for word, in other documents (the collapse_duplicates setting).
        "also_in": [
            {
                **copy.as_dict(),
                "url": passage_url(copy.document_id, copy.page, has_original=copy.has_original),
            }
            for copy in hit.also_in
        ],
    }


def _run(cl: Citeline, access: Access, request: SearchRequest) -> FastJSONResponse:
    check_text_length(request.query, "query", cl.settings)
    hits = cl.search(request, access=access)
    # Plain JSON, not through a response model: search is the hot path, and its results are built here
    # and rendered by pydantic-core (see citeline.api.responses).
    body: dict[str, Any] = {"query": request.query, "count": len(hits), "results": [result(h) for h in hits]}
    migration = cl.migration()
    if migration is not None:
        # Searches go on in the old model's space while the new one is built; say how far it is.
        m, p = migration.migration, migration.progress
        body["migration"] = {
            "source_model": m.source_model,
            "target_model": m.target_model,
            "done": p.done,
            "total": p.total,
        }
    return FastJSONResponse(body)


# Declared through responses=, not response_model=: search is the hot path, and a response model would
# validate every result again (see citeline.api.schemas).
@router.post(
    "/search",
    summary="Hybrid search with every filter and knob",
    operation_id="search",
    responses=answers(SearchResponse, *KEYED, 404),
)
def search_post(body: SearchBody, cl: CitelineDep, access: AccessDep) -> FastJSONResponse:
    request = SearchRequest(
        query=body.query,
        filters=body.filters(cl, access),
        top_k=body.top_k,
        distance_threshold=body.distance_threshold,
        fusion=body.fusion,
        candidates=body.candidates,
        rerank=body.rerank,
        mmr_lambda=body.mmr_lambda,
    )
    return _run(cl, access, request)


@router.get(
    "/search",
    summary="Hybrid search from a query string",
    operation_id="search_by_query",
    responses=answers(SearchResponse, *KEYED),
)
def search_get(
    cl: CitelineDep,
    access: AccessDep,
    q: Annotated[Text, Query(min_length=1, description="What to search for.")],
    n: Annotated[int | None, Query(ge=1, le=1000, description="How many results.")] = None,
    category: Annotated[str | None, Query(description="This category or any below it.")] = None,
    scope: Annotated[list[Scope] | None, Query(description="Repeatable: documents in these scopes.")] = None,
    tag: Annotated[list[str] | None, Query(description="Repeatable: any of these tags.")] = None,
    model: Annotated[list[str] | None, Query(description="Repeatable: chunks naming a model number.")] = None,
    section: Annotated[
        list[SectionType] | None, Query(description="Repeatable: chunks of a section type.")
    ] = None,
) -> FastJSONResponse:
    try:
        filters = Filters(
            scopes=tuple(scope) if scope else None,
            category=category,
            tags_any=tuple(tag or ()),
            model_numbers=tuple(model or ()),
            section_types=tuple(t.value for t in section or ()),
        )
    except InvalidRequestError as exc:
        raise field_named(
            exc, {"scopes": "query.scope", "category": "query.category", "tags": "query.tag"}
        ) from exc
    return _run(cl, access, SearchRequest(query=q, filters=filters, top_k=n))
