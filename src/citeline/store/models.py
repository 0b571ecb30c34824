"""The catalog's tables, as SQLAlchemy 2 models. Alembic migrations create them; this module describes them.

A ``Document`` row is one *version* of a source. Readers only ever see the active version of each
source; a new version is filled invisibly and swapped in by one transaction. Chunks, their vectors and
their keyword postings hang off a version with ``ON DELETE CASCADE``, so deleting a version can leave
nothing behind.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Any

from pgvector.sqlalchemy import Vector
from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Status(StrEnum):
    """Where a document version is in its life."""

    PENDING = "pending"
    QUEUED = "queued"
    PROCESSING = "processing"
    COMPLETED = "completed"
    FAILED = "failed"
    #: Complete, embedded by the target of a model migration, waiting for the switch (never visible).
    STAGED = "staged"
    #: Replaced by a newer version but cited by a live conversation: kept, never searched, with only
    #: its cited pages' chunks (no vectors, no postings) and its original (see catalog.activate).
    SUPERSEDED = "superseded"


class Base(DeclarativeBase):
    pass


class Document(Base):
    __tablename__ = "documents"

    #: This version's id (what chunks, postings and the keyword log refer to).
    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True, default=uuid.uuid4)
    #: The document's id, shared by all versions of one source (what users and the API see).
    document_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True))
    name: Mapped[str] = mapped_column(Text)
    title: Mapped[str | None] = mapped_column(Text)
    source_uri: Mapped[str] = mapped_column(Text)
    content_type: Mapped[str | None] = mapped_column(String(100))
    file_path: Mapped[str | None] = mapped_column(Text)
    content_hash: Mapped[str | None] = mapped_column(String(64))
    version: Mapped[int] = mapped_column(Integer)
    is_active: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    status: Mapped[str] = mapped_column(String(20), server_default=Status.PENDING.value)
    error: Mapped[str | None] = mapped_column(Text)
    duration_ms: Mapped[float | None] = mapped_column(Float)
    processed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    page_count: Mapped[int | None] = mapped_column(Integer)
    vector_count: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    #: Keyword terms in the whole version (its document-level BM25 length); set when it is swapped in.
    keyword_length: Mapped[int | None] = mapped_column(Integer)
    embedding_model: Mapped[str | None] = mapped_column(Text)
    #: The vector index holding this version's vectors (see store/index.py): pgvector or chroma.
    vector_index: Mapped[str] = mapped_column(Text, server_default=text("'pgvector'"))
    chunk_size: Mapped[int | None] = mapped_column(Integer)
    chunk_overlap: Mapped[int | None] = mapped_column(Integer)
    category: Mapped[str | None] = mapped_column(Text)
    tags: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{}'"))
    scopes: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{}'"))
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSONB, server_default=text("'{}'"))
    #: What the loader found (PDF author, final URL, ...); never matched by filters.
    source_metadata: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default=text("'{}'"))
    uploaded_by: Mapped[str | None] = mapped_column(Text)
    #: The ingest run writing this version while it is processing (see catalog.hold_run).
    ingest_run: Mapped[int | None] = mapped_column(BigInteger)
    #: The version as a job (see catalog's job functions): runs that claimed it, when it was queued and
    #: started, the earliest time a retry may start, and whether it was asked to stop.
    attempts: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    queued_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    not_before: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    cancel_requested: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    #: When the source was last read at its origin (a URL fetched, a file read at its path); uploads
    #: have none. ``citeline refresh`` reads the oldest again.
    last_fetched_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    #: When the document was first added: the same on every version, copied to each new one (the
    #: versions it was first added as may have been deleted since).
    added_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    #: When this version was made.
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), onupdate=func.now()
    )

    __table_args__ = (
        CheckConstraint(
            "status IN ('pending', 'queued', 'processing', 'completed', 'failed', 'staged', 'superseded')",
            name="documents_status",
        ),
        # At most one visible version per source.
        Index("documents_one_active", "source_uri", unique=True, postgresql_where=text("is_active")),
        Index(
            "documents_one_active_document", "document_id", unique=True, postgresql_where=text("is_active")
        ),
        Index("documents_document", "document_id", "version"),
        # Which documents hold a file's bytes, built or not yet (catalog.same_content).
        Index(
            "documents_held_content",
            "content_hash",
            postgresql_where=text("is_active OR status IN ('pending', 'queued', 'processing')"),
        ),
        Index("documents_queue", "queued_at", postgresql_where=text("status = 'queued'")),
        Index("documents_source_version", "source_uri", "version", unique=True),
        # Listing by the start of a source key (catalog.query_documents): LIKE 'prefix%' in any collation.
        Index("documents_source_pattern", "source_uri", postgresql_ops={"source_uri": "text_pattern_ops"}),
        Index("documents_scopes", "scopes", postgresql_using="gin"),
        Index("documents_tags", "tags", postgresql_using="gin"),
    )


class Chunk(Base):
    __tablename__ = "chunks"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    document_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), ForeignKey("documents.id", ondelete="CASCADE")
    )
    version: Mapped[int] = mapped_column(Integer)
    chunk_index: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)
    text_hash: Mapped[str] = mapped_column(String(64))
    page: Mapped[int] = mapped_column(Integer)
    start_offset: Mapped[int] = mapped_column(Integer)
    end_offset: Mapped[int] = mapped_column(Integer)
    section: Mapped[str | None] = mapped_column(Text)
    #: Text embedded and indexed with the chunk but not part of it (types.ChunkDraft.context).
    context: Mapped[str | None] = mapped_column(Text)
    #: ``[first, last]``: the rows of the source file the chunk holds (a CSV's, types.ChunkDraft.rows).
    rows: Mapped[list[int] | None] = mapped_column(ARRAY(Integer))
    # Untyped so vectors of any model fit; each model gets its own partial HNSW index over a cast to
    # its dimension (see vectors.ensure_index), which is also what keeps vector spaces apart. NULL when
    # another vector index (Chroma) holds the chunk's vector.
    embedding: Mapped[Any] = mapped_column(Vector(), nullable=True)
    embedding_model: Mapped[str] = mapped_column(Text)
    token_count: Mapped[int] = mapped_column(Integer)
    #: Auto-metadata (see citeline.annotate): canonical model-number keys, and the section's type.
    model_numbers: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default="{}")
    section_type: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        Index("chunks_document", "document_id", "chunk_index"),
        Index("chunks_model_hash", "embedding_model", "text_hash"),
        Index("chunks_model_numbers", "model_numbers", postgresql_using="gin"),
        Index("chunks_section_type", "section_type", postgresql_where=section_type.isnot(None)),
    )


class Posting(Base):
    """One keyword entry: term ``term`` occurs ``tf`` times in chunk ``chunk_id`` of length ``dl``.

    ``document_id`` and ``dl`` are copies (immutable for a chunk's life) so BM25 can be scored from
    the term index alone, joining only the small documents table for filters.
    """

    __tablename__ = "postings"

    chunk_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("chunks.id", ondelete="CASCADE"), primary_key=True
    )
    term: Mapped[str] = mapped_column(Text, primary_key=True)
    tf: Mapped[int] = mapped_column(Integer)
    dl: Mapped[int] = mapped_column(Integer)
    document_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True))

    __table_args__ = (
        Index("postings_term", "term", postgresql_include=["chunk_id", "tf", "dl", "document_id"]),
    )


class DocumentTerm(Base):
    """One document-level keyword entry: term ``term`` occurs ``tf`` times in the whole of version
    ``document_id`` (BM25 over whole documents, beside the chunks' postings)."""

    __tablename__ = "document_terms"

    document_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), ForeignKey("documents.id", ondelete="CASCADE"), primary_key=True
    )
    term: Mapped[str] = mapped_column(Text, primary_key=True)
    tf: Mapped[int] = mapped_column(Integer)

    __table_args__ = (Index("document_terms_term", "term", postgresql_include=["document_id", "tf"]),)


class CorpusStats(Base):
    """Totals over the active chunks and the active versions (BM25's N and avgdl at each level), kept
    in step by the transactions changing them."""

    __tablename__ = "corpus_stats"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    chunk_count: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    token_total: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    document_count: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    document_token_total: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    analyzer: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    #: The model the namespace serves: every active version and every query is embedded by it.
    embedding_model: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (CheckConstraint("id = 1", name="corpus_stats_single_row"),)


class ModelMigration(Base):
    """One change of the namespace's embedding model (see citeline.store.model_migration)."""

    __tablename__ = "model_migrations"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    source_model: Mapped[str] = mapped_column(Text)
    target_model: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(Text, server_default=text("'running'"))
    forced: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    check_result: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        CheckConstraint("status IN ('running', 'switched', 'aborted')", name="model_migrations_status"),
        Index(
            "model_migrations_one_running",
            text("(true)"),
            unique=True,
            postgresql_where=text("status = 'running'"),
        ),
    )


class Conversation(Base):
    """One user's conversation. It expires ``conversation_ttl_days`` after its last message."""

    __tablename__ = "conversations"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True, default=uuid.uuid4)
    user_id: Mapped[str] = mapped_column(Text)
    title: Mapped[str | None] = mapped_column(Text)
    persona: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        Index("conversations_user_updated", "user_id", "updated_at"),
        Index("conversations_expires", "expires_at"),
    )


class Message(Base):
    """One message of a turn: the user's question (with the standalone query searched for it) or the answer.

    ``cited_chunk_ids`` lists the chunks an answer cited, in the order of their citation numbers. It has
    no foreign key: while the conversation lives, a version it cites is kept when a newer one replaces
    it (status ``superseded``), but a deleted document takes its chunks with it, and old answers keep
    their numbers. ``checks`` holds what citeline checked of an answer (its citations as they were
    shown, unsupported sentences, missing evidence); None for answers stored before it was kept.
    """

    __tablename__ = "messages"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    conversation_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), ForeignKey("conversations.id", ondelete="CASCADE")
    )
    turn: Mapped[int] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(String(20))
    content: Mapped[str] = mapped_column(Text)
    standalone_query: Mapped[str | None] = mapped_column(Text)
    cited_chunk_ids: Mapped[list[int]] = mapped_column(ARRAY(BigInteger), server_default=text("'{}'"))
    provider: Mapped[str | None] = mapped_column(Text)
    checks: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        CheckConstraint("role IN ('user', 'assistant')", name="messages_role"),
        UniqueConstraint("conversation_id", "turn", "role", name="messages_turn_role"),
        Index("messages_cited_chunks", "cited_chunk_ids", postgresql_using="gin"),
    )


class ApiKey(Base):
    """An API key: its hash (never the key), role and, for readers, the scopes it is bound to.

    ``scopes`` NULL means every scope; an empty array means universal documents only.
    """

    __tablename__ = "api_keys"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True, default=uuid.uuid4)
    name: Mapped[str] = mapped_column(Text)
    role: Mapped[str] = mapped_column(String(20))
    scopes: Mapped[list[str] | None] = mapped_column(ARRAY(Text))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        CheckConstraint("role IN ('admin', 'reader')", name="api_keys_role"),
        CheckConstraint("role = 'reader' OR scopes IS NULL", name="api_keys_admin_unscoped"),
    )
