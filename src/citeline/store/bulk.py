"""Loading documents whose chunks and vectors were computed elsewhere, through the catalog's own writes.

A corpus embedded once by another system (or by a batch job on a machine with a GPU) should not be
embedded again to enter citeline, and a benchmark of millions of chunks cannot wait hours for an
embedder. :func:`load_prepared` takes chunk texts with their vectors and stores them exactly as
ingest does: the same version rows, chunk COPY, keyword postings and document terms (analysed here,
with the namespace's analyzer), the same atomic swap-in and keyword log. Nothing is written by SQL of
its own, so the store it builds is the store ingest builds.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray

from citeline.annotate import annotate
from citeline.checks import refuse_nul
from citeline.errors import ConfigError, InvalidRequestError
from citeline.load.clean import storable
from citeline.retrieve.filters import check_labels
from citeline.store import catalog
from citeline.store.analyzer import Analyzer, DocumentTerms
from citeline.store.catalog import ChunkRow, DocumentInfo, Labels, VersionSpec, VersionStart
from citeline.store.index import VectorIndex


@dataclass(frozen=True)
class PreparedChunk:
    """One chunk of a prepared document: its text and where it lies (``start:end`` of page ``page``)."""

    text: str
    page: int = 1
    start: int = 0
    #: None: ``start + len(text)``.
    end: int | None = None
    section: str | None = None

    def __post_init__(self) -> None:
        # Text to index is cleaned, not refused, as ingest cleans a caller's in-memory text: each NUL or
        # lone surrogate (which PostgreSQL cannot store, failing the COPY of every document loaded with
        # it) becomes U+FFFD, one for one, so offsets still hold; the vectors were computed on the same
        # text but for that character. Here rather than in load_prepared, so the request check that
        # refuses a NUL in a document's names never sees one in its text.
        object.__setattr__(self, "text", storable(self.text))
        if self.section is not None:
            object.__setattr__(self, "section", storable(self.section))


@dataclass(frozen=True)
class PreparedDocument:
    """A document cut into chunks and embedded elsewhere: ``vectors`` holds one row per chunk, in order,
    embedded by the model the load names."""

    source_uri: str
    name: str
    chunks: Sequence[PreparedChunk]
    vectors: NDArray[np.float32]
    labels: Labels = field(default_factory=Labels)
    title: str | None = None
    content_type: str = "text/plain"

    def __post_init__(self) -> None:
        # The title is text read from the source, cleaned as the chunks' texts are (see PreparedChunk).
        if self.title is not None:
            object.__setattr__(self, "title", storable(self.title))


def load_prepared(
    engine: sa.Engine,
    index: VectorIndex,
    analyzer: Analyzer,
    documents: Sequence[PreparedDocument],
    *,
    model: str,
    chunk_size: int,
    chunk_overlap: int,
    build_index: bool = True,
) -> list[DocumentInfo]:
    """Store ``documents`` as new versions of their sources and swap them in; returns the versions
    swapped in, in the order given (a source whose active version has the same texts, model and
    chunking is left as it is, and not returned).

    ``model`` must be the model the namespace serves (or any, for an empty namespace); versions of
    another are refused at the swap-in, as ingest refuses them. ``chunk_size`` and ``chunk_overlap``
    record how the chunks were cut. With ``build_index`` false the model's ANN index is not created
    here: loading many chunks and then building the index once (:meth:`VectorIndex.prepare`) is much
    faster than inserting each into a growing graph.
    """
    if not documents:
        return []
    for i, doc in enumerate(documents):
        _check_labels(doc.labels, f"documents[{i}].labels")
    documents = [_storable(d) for d in documents]
    dimension = _check_vectors(documents)
    uris = [d.source_uri for d in documents]
    if len(set(uris)) != len(uris):
        raise ConfigError("load_prepared: a source may appear only once per call")
    requests = [
        catalog.VersionRequest(
            d.source_uri,
            d.name,
            VersionSpec(_content_hash(d), model, chunk_size, chunk_overlap, index.name),
            d.labels,
        )
        for d in documents
    ]
    with engine.connect() as conn:
        # The run lock tells other processes' sweeps that these versions are being built, not abandoned.
        with conn.begin():
            key = catalog.hold_run(conn)
        try:
            if build_index:
                with conn.begin():
                    index.prepare(conn, model, dimension)
            with _fast(conn):
                begun = catalog.begin_versions(conn, requests, run=key)
                created = [
                    (doc, info)
                    for doc, (info, start) in zip(documents, begun, strict=True)
                    if start is VersionStart.CREATED
                ]
                groups = [
                    catalog.ChunkGroup(info, _rows(analyzer, doc), doc.vectors) for doc, info in created
                ]
                stored = catalog.insert_chunks(conn, model, groups, inline_vectors=index.in_rows)
            if not index.in_rows:
                # After the rows commit and before the swap-in, as ingest orders it (see store/index.py).
                with _fast(conn):
                    index.add(conn, model, stored)
            with _fast(conn):
                before = catalog.version_ids(conn, [info.source_uri for _, info in created])
                swapped = catalog.activate(
                    conn,
                    [
                        catalog.Activation(
                            info,
                            title=doc.title or doc.name,
                            content_type=doc.content_type,
                            file_path=None,
                            page_count=max((c.page for c in doc.chunks), default=0),
                            duration_ms=0.0,
                            terms=_document_terms(analyzer, doc),
                        )
                        for doc, info in created
                    ],
                    vector_index=index.name,
                )
                kept = {v.version_id for v in catalog.versions_by_id(conn, before)}
            retired = [v for v in before if v not in kept]
            if retired and not index.in_rows:
                with _fast(conn):
                    index.remove(conn, retired)
        finally:
            with conn.begin():
                catalog.release_run(conn, key)
    return swapped


def _check_vectors(documents: Sequence[PreparedDocument]) -> int:
    """The one dimension of every document's vectors, each holding one row per chunk."""
    dimensions = set()
    for doc in documents:
        if not doc.chunks:
            raise ConfigError(f"{doc.source_uri}: a prepared document needs at least one chunk")
        shape = np.shape(doc.vectors)
        if len(shape) != 2 or shape[0] != len(doc.chunks):
            raise ConfigError(
                f"{doc.source_uri}: {len(doc.chunks)} chunks need as many vectors, one per row; "
                f"got shape {shape}"
            )
        dimensions.add(int(shape[1]))
    if len(dimensions) != 1:
        raise ConfigError(f"load_prepared: vectors of one model have one dimension; got {sorted(dimensions)}")
    return dimensions.pop()


def _check_labels(labels: Labels, field: str) -> None:
    """Refuse ``labels`` as :class:`~citeline.ingest.IngestOptions` refuses them (they are the caller's
    own words, not cleaned), naming the field under ``field``."""
    refuse_nul(labels, field)
    try:
        check_labels(labels.scopes, labels.tags, labels.metadata)
    except InvalidRequestError as exc:
        raise InvalidRequestError(f"{field}.{exc}") from exc


def _storable(doc: PreparedDocument) -> PreparedDocument:
    """``doc`` with a source URI and name PostgreSQL can store (see :func:`storable`), as ingest stores a
    caller's in-memory source (its texts were made storable when it was built)."""
    uri, name = storable(doc.source_uri), storable(doc.name)
    if uri is doc.source_uri and name is doc.name:
        return doc
    return replace(doc, source_uri=uri, name=name)


def _content_hash(doc: PreparedDocument) -> str:
    digest = hashlib.sha256()
    for chunk in doc.chunks:
        digest.update(chunk.text.encode())
        digest.update(b"\x00")
    return digest.hexdigest()


def _rows(analyzer: Analyzer, doc: PreparedDocument) -> list[ChunkRow]:
    rows = []
    for i, chunk in enumerate(doc.chunks):
        counts = analyzer.term_counts(chunk.text)
        found = annotate(chunk.section, chunk.text)
        rows.append(
            ChunkRow(
                chunk_index=i,
                text=chunk.text,
                page=chunk.page,
                start=chunk.start,
                end=chunk.start + len(chunk.text) if chunk.end is None else chunk.end,
                section=chunk.section,
                terms=dict(counts),
                token_count=sum(counts.values()),
                model_numbers=found.model_numbers,
                section_type=found.section_type,
            )
        )
    return rows


def _document_terms(analyzer: Analyzer, doc: PreparedDocument) -> dict[str, int]:
    terms = DocumentTerms(analyzer)
    for chunk in doc.chunks:
        end = chunk.start + len(chunk.text) if chunk.end is None else chunk.end
        terms.add(chunk.page, chunk.start, end, chunk.text)
    return dict(terms.counts())


@contextmanager
def _fast(conn: sa.Connection) -> Iterator[sa.Connection]:
    """A transaction on ``conn`` that does not wait for its commit to reach disk (as ingest's: a crash
    can lose the last commits, never part of one)."""
    with conn.begin():
        conn.execute(sa.text("SET LOCAL synchronous_commit = off"))
        yield conn
