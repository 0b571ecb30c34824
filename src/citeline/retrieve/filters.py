"""Search filters, compiled to SQL over the ``documents`` table (alias ``d``).

They are applied inside each index query, before any top-k cut, so truncation can neither hide an
in-scope hit nor let an out-of-scope one through.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from citeline.annotate import SectionType, model_key
from citeline.checks import check_mapping, check_names, check_text, refuse_nul
from citeline.errors import InvalidRequestError
from citeline.load import CONTENT_TYPES, short_type


def normalise_category(category: str) -> str:
    """``/Engineering//Security/`` -> ``Engineering/Security``: categories are slash-separated paths."""
    return "/".join(part.strip() for part in category.split("/") if part.strip())


def category_condition(column: str, param: str, category: str) -> tuple[str, dict[str, Any]]:
    """A SQL condition that ``column`` is ``category`` or a category below it, with its parameters
    (named ``param`` and ``param_below``)."""
    cat = normalise_category(category)
    return (
        f"({column} = :{param} OR {column} LIKE :{param}_below ESCAPE '\\')",
        {param: cat, f"{param}_below": like_escape(cat) + "/%"},
    )


def check_scopes(scopes: Iterable[str] | None, what: str = "scope") -> None:
    """Refuse a blank scope (or tag, with ``what``): ``""`` names no scope anyone holds, so a document,
    key or filter given one would silently mean something other than what was asked. Refuse one that
    starts or ends with whitespace too: ``" clinic "`` is another scope than ``clinic``, which a
    document, a key and a filter must all spell alike (keys once stripped it, documents did not, and a
    key made for ``" clinic "`` could not see a document ingested with it)."""
    if scopes is not None and any(not scope.strip() for scope in scopes):
        raise InvalidRequestError(f"{what}s: a {what} must not be empty or blank; got {list(scopes)!r}")
    padded = [scope for scope in scopes or () if scope != scope.strip()]
    if padded:
        raise InvalidRequestError(
            f"{what}s: a {what} must not start or end with whitespace; got {padded[0]!r} "
            f"(did you mean {padded[0].strip()!r}?)"
        )
    for scope in scopes or ():
        if len(scope) > MAX_LABEL_CHARS:
            raise InvalidRequestError(
                f"{what}s: a {what} must be at most {MAX_LABEL_CHARS} characters; got one of {len(scope):,} "
                f"starting {scope[:40]!r}"
            )


#: The longest scope or tag: a name, not a text. Beyond about 2,700 bytes an entry no longer fits the
#: index that finds documents by their labels, and the whole request failed as the database's error.
MAX_LABEL_CHARS = 256


def check_labels(
    scopes: Iterable[str] | None, tags: Iterable[str] | None, metadata: Mapping[str, Any] | None
) -> None:
    """Refuse labels as every request type refuses them: a blank or over-long scope or tag
    (:func:`check_scopes`), a metadata value that is not a string (:func:`check_metadata`)."""
    check_scopes(scopes)
    check_scopes(tags, "tag")
    check_metadata(metadata)


#: The fields of :class:`Filters` that list names, and what they name.
_LISTS = {
    "scopes": "scopes",
    "tags_any": "tags",
    "tags_all": "tags",
    "content_types": "content types",
    "model_numbers": "model numbers",
    "section_types": "section types",
}


def check_metadata(metadata: Mapping[str, Any] | None) -> None:
    """Refuse a metadata value that is not a string: values are stored and compared as strings, so a
    number stored as a number would never match a filter."""
    for key, value in (metadata or {}).items():
        if not isinstance(value, str):
            raise InvalidRequestError(f"metadata.{key}: a metadata value must be a string, got {value!r}")


@dataclass(frozen=True)
class Filters:
    """Which documents a search may return. Empty fields do not filter.

    ``scopes``: a document is in scope when it is universal (has no scopes) or shares one with these;
    ``None`` does not filter by scope, and an empty tuple keeps universal documents only.
    ``category``: the category itself or any below it (``Engineering`` matches ``Engineering/Security``).
    ``tags_any`` / ``tags_all``: the document carries at least one / all of these tags.
    ``metadata``: every key equals the given value in the document's metadata.
    ``content_types``: the document's content type is one of these, given as stored (``text/csv``) or
    by the short name ``docs list`` shows (``csv``); kept as stored, and an unknown one is refused.
    ``model_numbers`` / ``section_types``: chunk-level auto-metadata (:mod:`citeline.annotate`): the
    chunk names any of these model numbers (matched by canonical key: ``xr200`` finds ``XR-200``) /
    has any of these section types.
    """

    scopes: tuple[str, ...] | None = None
    category: str | None = None
    tags_any: tuple[str, ...] = ()
    tags_all: tuple[str, ...] = ()
    document_ids: tuple[uuid.UUID, ...] = ()
    content_types: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    model_numbers: tuple[str, ...] = ()
    section_types: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name, what in _LISTS.items():
            check_names(getattr(self, name), name, what)
        check_mapping(self.metadata, "metadata")
        check_text(self.category, "category")
        if isinstance(self.document_ids, str | bytes) or not isinstance(self.document_ids, list | tuple):
            raise InvalidRequestError(f"document_ids: give a list of document ids, not {self.document_ids!r}")
        odd = [ref for ref in self.document_ids if not isinstance(ref, uuid.UUID)]
        if odd:
            raise InvalidRequestError(
                f"document_ids: a document id must be a uuid.UUID, got {odd[0]!r} "
                "(Citeline.document_ids resolves ids and their prefixes)"
            )
        refuse_nul(self, "filters")
        check_labels(self.scopes, (*self.tags_any, *self.tags_all), self.metadata)
        known = [t.value for t in SectionType]
        unknown = sorted(set(self.section_types) - set(known))
        if unknown:
            raise InvalidRequestError(
                f"unknown section type {', '.join(map(repr, unknown))}; known: {', '.join(known)}"
            )
        blank = [m for m in self.model_numbers if not model_key(m)]
        if blank:
            raise InvalidRequestError(f"model number {blank[0]!r} has no letters or digits")
        object.__setattr__(self, "content_types", content_types(self.content_types))

    @property
    def on_chunks(self) -> bool:
        """Whether a filter applies to chunks (their auto-metadata), not only to their documents."""
        return bool(self.model_numbers or self.section_types)

    @property
    def is_empty(self) -> bool:
        return not (
            self.scopes is not None
            or self.category
            or self.tags_any
            or self.tags_all
            or self.document_ids
            or self.content_types
            or self.metadata
            or self.on_chunks
        )

    def sql(self) -> tuple[str, dict[str, Any]]:
        """A boolean SQL condition on ``d`` (always including ``d.is_active``) and its parameters."""
        conds = ["d.is_active"]
        params: dict[str, Any] = {}
        if self.scopes is not None and not self.scopes:
            conds.append("cardinality(d.scopes) = 0")
        elif self.scopes:
            conds.append("(cardinality(d.scopes) = 0 OR d.scopes && CAST(:f_scopes AS text[]))")
            params["f_scopes"] = list(self.scopes)
        if self.category:
            condition, bound = category_condition("d.category", "f_cat", self.category)
            conds.append(condition)
            params.update(bound)
        if self.tags_any:
            conds.append("d.tags && CAST(:f_tags_any AS text[])")
            params["f_tags_any"] = list(self.tags_any)
        if self.tags_all:
            conds.append("d.tags @> CAST(:f_tags_all AS text[])")
            params["f_tags_all"] = list(self.tags_all)
        if self.document_ids:
            conds.append("d.document_id = ANY(CAST(:f_ids AS uuid[]))")
            params["f_ids"] = list(self.document_ids)
        if self.content_types:
            conds.append("d.content_type = ANY(CAST(:f_types AS text[]))")
            params["f_types"] = list(self.content_types)
        if self.metadata:
            conds.append("d.metadata @> CAST(:f_meta AS jsonb)")
            params["f_meta"] = json.dumps(self.metadata)
        return " AND ".join(conds), params

    def chunk_sql(self, alias: str = "c") -> tuple[str, dict[str, Any]]:
        """The chunk-level filters as a boolean SQL condition on the chunks table ``alias`` (``TRUE``
        when there are none) and its parameters."""
        conds = ["TRUE"]
        params: dict[str, Any] = {}
        if self.model_numbers:
            conds.append(f"{alias}.model_numbers && CAST(:f_models AS text[])")
            params["f_models"] = sorted({model_key(m) for m in self.model_numbers})
        if self.section_types:
            conds.append(f"{alias}.section_type = ANY(CAST(:f_sections AS text[]))")
            params["f_sections"] = sorted(set(self.section_types))
        return " AND ".join(conds), params


def content_types(given: Iterable[str], *, field: str = "content_types") -> tuple[str, ...]:
    """The MIME types a content-type filter names, each once: a stored type (``application/pdf``, any
    case) or its short name as ``docs list`` shows it (``pdf``, ``text``, ``csv``). A name no document
    can have is refused with the known ones, where it would have matched nothing; the refusal names
    ``field``, the caller's (a listing's ``content_type``)."""
    by_name = {**{short_type(t): t for t in CONTENT_TYPES}, **{t: t for t in CONTENT_TYPES}}
    out: dict[str, None] = {}
    for name in given:
        known = by_name.get(name.strip().lower())
        if known is None:
            shorts = ", ".join(sorted(short_type(t) for t in CONTENT_TYPES))
            raise InvalidRequestError(
                f"{field}: unknown content type {name!r}; known: {shorts} "
                f"(or as stored: {', '.join(CONTENT_TYPES)})"
            )
        out[known] = None
    return tuple(out)


def like_escape(value: str) -> str:
    """``value`` matched literally inside a LIKE pattern whose escape character is a backslash."""
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
