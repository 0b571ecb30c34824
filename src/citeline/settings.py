"""All of citeline's settings in one object, read from ``CITELINE_*`` environment variables or ``.env``.

The object is passed down explicitly; no module reads the environment on its own.
"""

from __future__ import annotations

import difflib
import functools
import os
import re
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from citeline.errors import ConfigError
from citeline.split import CHUNK_OVERLAP_MAX, CHUNK_SIZE_MAX, CHUNK_SIZE_MIN

NAMESPACE_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,40}$")

#: The answering personas; ``answer/prompt.py`` holds the system prompt of each.
Persona = Literal["general", "clinical", "repair"]


#: The labels ``label_boost`` selects documents by: ``tag:<tag>``, ``category:<category>``, ``scope:<scope>``.
LABEL_KINDS = ("tag", "category", "scope")


class Fusion(StrEnum):
    """How dense and keyword rankings are combined."""

    RECIPROCAL_RANK = "rrf"
    WEIGHTED = "weighted"
    DISTRIBUTION = "dbsf"


class Settings(BaseSettings):
    """citeline's configuration. Every field can be set as ``CITELINE_<FIELD>``."""

    # Extra environment variables are ignored (another citeline's, say); extra keywords are refused
    # in __init__.
    model_config = SettingsConfigDict(env_prefix="CITELINE_", env_file=".env", extra="ignore")

    def __init__(self, **values: Any) -> None:
        """The settings from the environment (and ``.env``) with ``values`` given by keyword.

        Raises :class:`ConfigError`: for a keyword that names no setting (``top_kk=3`` was ignored), and
        for an invalid value, naming its variable on one line (``CITELINE_TOP_K: ...``), as
        :func:`load_settings` does; pydantic's own ``ValidationError`` spans several lines and is
        outside citeline's errors.
        """
        # pydantic-settings' own keywords (_env_file, _secrets_dir, ...) start with an underscore.
        unknown = [name for name in values if not name.startswith("_") and name not in _keywords()]
        if unknown:
            close = difflib.get_close_matches(unknown[0], sorted(type(self).model_fields), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(
                f"unknown setting {unknown[0]!r}{hint}; docs/configuration.md lists the settings"
            )
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise ConfigError(f"invalid setting: {describe_invalid(exc)}") from exc
        except SettingsError as exc:
            raise ConfigError(f"invalid setting: {describe_unparsed(exc)}") from exc

    data_dir: Path = Field(
        default=Path("citeline-data"),
        description="Where the embedded PostgreSQL and stored original files live.",
    )
    database_url: str | None = Field(
        default=None,
        description="postgresql:// URL of an external server with pgvector; unset means embedded mode.",
    )
    namespace: str = Field(
        default="default",
        description="Independent collection of documents (one PostgreSQL schema each).",
    )

    vector_backend: Literal["pgvector", "chroma"] = Field(
        default="pgvector",
        description="Where chunk vectors live and are searched: pgvector (in the catalog's PostgreSQL) or "
        "chroma (embedded in the data directory, a server at chroma_url, or Chroma Cloud).",
    )
    chroma_url: str | None = Field(
        default=None,
        description="http(s):// URL of a Chroma server (`chroma run`); unset: embedded, or Chroma Cloud when "
        "chroma_api_key is set.",
    )
    chroma_api_key: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("chroma_api_key", "CITELINE_CHROMA_API_KEY", "CHROMA_API_KEY"),
        description="Chroma Cloud API key (also read from CHROMA_API_KEY); with no chroma_url, selects the "
        "cloud.",
    )
    chroma_tenant: str | None = Field(
        default=None,
        validation_alias=AliasChoices("chroma_tenant", "CITELINE_CHROMA_TENANT", "CHROMA_TENANT"),
        description="Chroma tenant (also CHROMA_TENANT); unset: the server's default, or the key's own.",
    )
    chroma_database: str | None = Field(
        default=None,
        validation_alias=AliasChoices("chroma_database", "CITELINE_CHROMA_DATABASE", "CHROMA_DATABASE"),
        description="Chroma database (also CHROMA_DATABASE); unset: the server's default, or the key's own.",
    )

    embedding_model: str = Field(
        default="onnx:all-MiniLM-L6-v2",
        description="provider:model string: onnx:<packaged model>, openai:<model>, ollama:<model>, "
        "sentence-transformers:<local folder>.",
    )
    embed_batch_size: Annotated[int, Field(ge=1, le=1024)] = Field(
        default=32, description="Texts per model run, or per request to a remote provider."
    )
    embed_threads: Annotated[int, Field(ge=0, le=256, description="0 means all cores.")] = 0
    # A 21-token query embedded in 5.6 ms with two intra-op threads, 9.9 ms with one (2 cores).
    query_threads: Annotated[
        int, Field(ge=1, le=256, description="Cores that embed one search query (its own model session).")
    ] = 2
    query_cache_size: Annotated[
        int, Field(ge=0, le=1_000_000, description="Recent query vectors kept for repeated searches.")
    ] = 256
    embed_base_url: str | None = Field(
        default=None,
        description="Base URL of the openai: or ollama: embedding server; unset: OpenAI "
        "(https://api.openai.com/v1) or a local Ollama (http://127.0.0.1:11434).",
    )
    embed_api_key: SecretStr | None = Field(
        default=None,
        description="Key sent to the openai: or ollama: embedding server (as a bearer token); unset, "
        "openai: sends openai_api_key.",
    )
    embed_timeout: Annotated[float, Field(gt=0, le=3_600)] = Field(
        default=60.0, description="Seconds a remote embedding request may take (connecting, then each read)."
    )
    embed_retries: Annotated[int, Field(ge=0, le=20)] = Field(
        default=3,
        description="Retries of a remote embedding request that failed for a passing reason (timeout, "
        "connection, HTTP 408, 425, 429, 500, 502-504).",
    )
    embed_retry_delay: Annotated[float, Field(ge=0, le=600)] = Field(
        default=1.0,
        description="Seconds before the first retry of a remote embedding request; each later one waits "
        "twice as long (or what the server's Retry-After asks, up to a minute).",
    )
    # The quality check before a namespace switches embedding model (citeline migrate, docs/ingesting.md).
    migration_max_loss: Annotated[float, Field(ge=0, le=1)] = Field(
        default=0.02,
        description="With gold questions, the switch passes when the paired 95% interval of nDCG@10 "
        "(new minus old) stays above minus this.",
    )
    migration_min_overlap: Annotated[float, Field(ge=0, le=1)] = Field(
        default=0.3,
        description="Without gold questions, the switch passes when the mean overlap of old and new "
        "top-10 on sampled chunks used as queries is at least this.",
    )
    migration_sample: Annotated[int, Field(ge=1, le=100_000)] = Field(
        default=200, description="Chunks sampled as queries by the overlap check."
    )

    # Chosen on SciFact (citeline eval, weighted fusion, no reranker), nDCG@10 / recall@100: 500/75
    # 0.726/0.964, 800/120 0.738/0.969, 1000/150 0.730/0.961, 1500/200 0.732/0.965. 800 characters is
    # ~170-190 tokens: inside the embedder's 256-token window, and short evidence for answer prompts.
    chunk_size: Annotated[int, Field(ge=CHUNK_SIZE_MIN, le=CHUNK_SIZE_MAX)] = 800
    chunk_overlap: Annotated[int, Field(ge=0, le=CHUNK_OVERLAP_MAX)] = 120

    # Measured on SciFact (citeline eval, chunks 800/120): dbsf 0.745 nDCG@10, weighted 0.738,
    # reciprocal rank 0.708; dbsf also led at chunks 500/75 and 1500/200 (docs/search.md). Against
    # weighted on 450 claims (300 test, 150 untuned): Δ +0.007, 95% CI +0.001 to +0.013.
    fusion: Fusion = Fusion.DISTRIBUTION
    rrf_k: Annotated[int, Field(ge=1)] = 60
    weight_semantic: Annotated[float, Field(ge=0)] = 0.6
    weight_keyword: Annotated[float, Field(ge=0)] = 0.2
    weight_source: Annotated[float, Field(ge=0)] = 0.2
    # Off: in place of chunk BM25 it moved nDCG@10 by -0.004 (test claims) and +0.011 (untuned
    # claims), neither beyond the noise, and 5-fold cross-validation did not prefer it (docs/evaluation.md).
    weight_document: Annotated[float, Field(ge=0)] = Field(
        default=0.0,
        description=(
            "Weight of whole-document BM25 in weighted and dbsf fusion: the score of each of the best "
            "documents reaches its candidate chunks. 0 leaves it out."
        ),
    )
    document_chunks: Annotated[int, Field(ge=0, le=1000)] = Field(
        default=0,
        description=(
            "With whole-document BM25 on (weight_document > 0): each of the best documents brings its "
            "first N chunks into the candidates, besides its best keyword chunk, so its score can lift "
            "a chunk that neither the dense nor the chunk keyword list found. 0: its best keyword chunk only."
        ),
    )
    source_boost: dict[str, Annotated[float, Field(ge=0, le=1)]] = Field(
        # Every content type alike: the kind of file says nothing of a passage's relevance (a reference
        # table's exact row ranked under PDF passages holding no word of the query at 0.5 for CSV).
        default_factory=lambda: {
            "application/pdf": 1.0,
            "text/markdown": 1.0,
            "text/html": 1.0,
            "text/plain": 1.0,
            "text/csv": 1.0,
        },
        description="Per content type, in [0, 1]; used by weighted and dbsf fusion (not rrf).",
    )
    label_boost: dict[str, Annotated[float, Field(ge=0, le=1)]] = Field(
        # Empty: no document is preferred for its labels, and searches skip the work entirely.
        default_factory=dict,
        description=(
            "Per label selector (tag:<tag>, category:<category>, scope:<scope>), in [0, 1]: a document "
            "carrying the label (a category: it or one below it) gets weight_source times the largest "
            "boost among its labels in weighted and dbsf fusion (not rrf). {}: none."
        ),
    )
    keyword_index: Literal["memory", "sql"] = Field(
        default="memory",
        description=(
            "memory: BM25 arrays in the process, loaded on first search and kept in step with the "
            "catalog (fast; for servers and long runs). sql: scored by PostgreSQL per query (no warm-up)."
        ),
    )
    # The keyword analyzer of a namespace is fixed by its first ingest (changing it needs a new namespace).
    keyword_lowercase: bool = True
    keyword_stem: bool = Field(default=True, description="Snowball-stem ordinary words.")
    keyword_stop_words: bool = Field(default=True, description="Drop English stop words.")
    keyword_extra_stop_words: list[str] = Field(
        default_factory=list, description="Domain stop words, e.g. patient, study, results."
    )
    keyword_keep_technical: bool = Field(
        default=True, description="Keep acronyms and hyphenated terms (LDL-C, FH) whole and unstemmed."
    )
    keyword_language: str = Field(default="english", description="Snowball stemmer language.")
    candidates: Annotated[int, Field(ge=1, le=10_000)] = 100
    top_k: Annotated[int, Field(ge=1, le=10_000)] = 10
    distance_threshold: Annotated[float | None, Field(ge=0, le=2)] = None
    collapse_duplicates: bool = Field(
        default=True,
        description=(
            "A passage stored word for word in several documents (a file uploaded twice, a guideline filed "
            "under several journeys) is one hit, naming the other copies (Hit.also_in), not several."
        ),
    )
    hnsw_ef_search: Annotated[int, Field(ge=1, le=1000)] = 100
    # Below this many in-filter chunks an exact scan beats walking HNSW (measured ~3.5 us a vector here).
    exact_search_below: Annotated[int, Field(ge=0)] = 2_000
    # Above it, a filter's chunks are still scanned exactly while that is cheaper than walking the index:
    # one HNSW result tuple cost about 18 exact-scan rows at 100k chunks (bench/run.py search section).
    hnsw_tuple_cost: Annotated[float, Field(ge=0, le=10_000)] = 18.0
    # A wide filter (it keeps at least 2 * candidates / this share of the chunks) is searched unfiltered for
    # that many nearest chunks, of which those in the filter are kept: no documents scan per search, which
    # cost 19 ms of a 22 ms dense stage at a million chunks (docs/performance.md). 0: never.
    hnsw_post_filter_max: Annotated[int, Field(ge=0, le=1000)] = 1000
    memory_vectors_mb: Annotated[int, Field(ge=0)] = Field(
        default=256,
        description=(
            "While the corpus's vectors fit in this many MB (384 dimensions: about 170,000 chunks), each "
            "search process holds them and compares them exactly, instead of walking pgvector's HNSW "
            "index, for every search that compares at most 50,000 of them (all of a small corpus, or the "
            "rows of a filter): faster, exact, and a filter costs no more than none. A search that would "
            "compare more goes to the index (store/memory_vectors.py). 0: always the index."
        ),
    )
    # After a restart a large store's pages are on disk: read them in when a server starts (store/prewarm.py).
    prewarm_mb: Annotated[int | None, Field(ge=0)] = Field(
        default=None,
        description=(
            "At most this many MB of what every search reads (the model's HNSW index, then the chunk rows) "
            "are read into the page cache when a server starts; unset: half of the memory available then; "
            "0: none."
        ),
    )
    # PostgreSQL's default maintenance_work_mem (64 MB) holds the HNSW graph of only ~35k 384-dim chunks;
    # past that pgvector builds on disk, many times slower. A build takes this much once, then frees it.
    hnsw_build_memory_mb: Annotated[int, Field(ge=64, le=1_048_576)] = Field(
        default=1024,
        description=(
            "maintenance_work_mem for building a model's HNSW index, in MB: the graph of n vectors of d "
            "dimensions needs about n * (4 * d + 300) bytes to build in memory (2M x 384: ~3.7 GB)."
        ),
    )
    # Measured on SciFact (citeline eval, 20 candidates). At chunks 1000/150: none 0.730 nDCG@10, prf
    # 0.740, maxsim 0.739 (~1.3 s a search). At the default chunks 800/120: none 0.738, prf 0.736; so
    # none, the cheaper, is the default. recall@100 is unchanged by a reranker (0.969 at 800/120).
    reranker: str = Field(
        default="none",
        description=(
            "Second stage over the best hybrid hits (retrieve/rerank.py): none; prf (feedback on the "
            "stored vectors, a few ms); maxsim (best-sentence similarity, embeds sentences per search: "
            "hundreds of ms); cross-encoder:<local folder> (ONNX model.onnx + tokenizer.json)."
        ),
    )
    rerank_candidates: Annotated[int, Field(ge=1, le=1000)] = Field(
        default=20,
        description="How many of the best hybrid hits the reranker and MMR see (prf: 20 beat 10, 30 and 50).",
    )
    mmr_lambda: Annotated[float | None, Field(ge=0, le=1)] = Field(
        default=None,
        description="Maximal marginal relevance over the reranked hits: 1 keeps the order, lower "
        "values demote near-duplicates; unset means no MMR.",
    )

    # -- answers (answer/, chat/) ---------------------------------------------------------------
    llm: str = Field(
        default="local:qwen2.5-coder-0.5b-instruct",
        description=(
            "provider:model of the answering model: local:<packaged GGUF>, openai:<model>, "
            "anthropic:<model>, or extractive (no LLM)."
        ),
    )
    llm_base_url: str | None = Field(
        default=None, description="Base URL of an OpenAI-compatible server (Ollama, vLLM, llama.cpp...)."
    )
    anthropic_base_url: str | None = Field(
        default=None,
        description="Base URL of an Anthropic Messages API server (a proxy, llama.cpp...); unset: Anthropic.",
    )
    openai_api_key: SecretStr | None = None
    anthropic_api_key: SecretStr | None = None
    llm_temperature: Annotated[float, Field(ge=0, le=2)] = 0.0
    llm_max_tokens: Annotated[int, Field(ge=1, le=32_768)] = 512
    llm_timeout: Annotated[float, Field(gt=0)] = 120.0
    llm_threads: Annotated[int, Field(ge=0, le=256, description="0 means all cores.")] = 1
    llm_batch_threads: Annotated[int, Field(ge=0, le=256)] = Field(
        default=0,
        description="Local models: threads that read the prompt (llm_threads write the answer); 0 means "
        "all cores.",
    )
    llm_citation_grammar: bool = Field(
        default=True,
        description="Local models: hold the answer to sentences that each end with a citation.",
    )
    llm_context: Annotated[int, Field(ge=512, le=131_072)] = 4096
    persona: Persona = Field(default="general", description="System prompt: general, clinical or repair.")
    answer_passages: Annotated[int, Field(ge=1, le=50)] = 5
    answer_min_similarity: Annotated[float, Field(ge=0, le=1)] = Field(
        default=0.25,
        description="Answers: below this cosine similarity for every passage (and with no passage holding "
        "half the question's terms), citeline says the documents hold no evidence instead of answering; "
        "0 turns the check off. Calibrated for the default embedder.",
    )
    answer_evidence_tokens: Annotated[int, Field(ge=0, le=100_000)] = Field(
        default=150,
        description="Tokens of evidence the model reads: each passage's sentences that best match the "
        "question, within this budget; 0 gives whole passages.",
    )
    conversation_ttl_days: Annotated[float, Field(gt=0)] = 30.0
    history_chunks: Annotated[int, Field(ge=0, le=50)] = Field(
        default=4,
        description=(
            "Chunks cited earlier in a conversation (most recently cited first) that join a follow-up's "
            "fresh hits as evidence; 0 turns this off."
        ),
    )
    follow_up_rewrite: Literal["auto", "llm", "heuristic"] = Field(
        default="auto",
        description=(
            "How follow-up questions become standalone search queries: llm (the answering model, its "
            "query checked, the heuristic as fallback), heuristic (no model call), or auto: the model "
            "unless it is a packaged local model under 1B parameters (the 0.5B one cost ~4 s per "
            "follow-up here and had 1 of 4 rewrites accepted), or extractive."
        ),
    )

    # -- ingestion jobs (jobs/) -------------------------------------------------------------------
    job_runner: Literal["thread", "celery"] = Field(
        default="thread",
        description="What processes queued documents: thread (a pool inside the serving process) or "
        "celery (`citeline worker` processes, on any machines, fed through Redis: CITELINE_REDIS_URL).",
    )
    redis_url: str | None = Field(
        default=None,
        description="redis:// URL of the broker between the processes that queue documents and "
        "`citeline worker` (the celery job runner).",
    )
    job_workers: Annotated[int, Field(ge=1, le=64)] = Field(
        default=1, description="Jobs built at once by a thread runner (each embeds with all cores)."
    )
    job_batch: Annotated[int, Field(ge=1, le=256)] = Field(
        default=16, description="Queued documents one run claims and embeds together."
    )
    job_retries: Annotated[int, Field(ge=0, le=20)] = Field(
        default=3,
        description="Retries of a job that failed for a passing reason (database, remote model); bad "
        "input is never retried.",
    )
    job_retry_delay: Annotated[float, Field(ge=0)] = Field(
        default=2.0, description="Seconds before the first retry; each later one waits twice as long."
    )
    job_soft_time_limit: Annotated[float, Field(gt=0)] = Field(
        default=180.0,
        description="Seconds after which a document's job stops at its next page, or its next chunk within a "
        "page, and fails.",
    )
    job_hard_time_limit: Annotated[float, Field(gt=0)] = Field(
        default=600.0,
        description="Seconds after which a document's job is failed whatever it is doing; its work is "
        "discarded.",
    )
    job_poll_seconds: Annotated[float, Field(gt=0)] = Field(
        default=2.0, description="How often an idle runner looks for queued documents and stuck jobs."
    )
    url_allow_private: bool = Field(
        default=False,
        description="Let documents be added from URLs on loopback, private and link-local addresses.",
    )
    upload_max_bytes: Annotated[int, Field(ge=1)] = Field(
        default=100 * 1024 * 1024, description="Largest original a document upload may have."
    )
    upload_max_pages: Annotated[int, Field(ge=1)] = Field(
        default=2_000, description="Most pages an uploaded document may have; more fails its job."
    )

    # -- the API (citeline serve) ----------------------------------------------------------------
    api_open: bool = Field(
        default=False,
        description="Serve requests without an API key, as an admin (loopback addresses only; for trying "
        "citeline out). Without it, a server with no keys refuses every request but health.",
    )
    api_max_body_bytes: Annotated[int, Field(ge=1024)] = Field(
        default=1_048_576, description="Largest JSON request body, in bytes (uploads have their own limit)."
    )
    api_max_question_chars: Annotated[int, Field(ge=1, le=100_000)] = Field(
        default=4_000, description="Longest question (chat) or query (search), in characters."
    )
    api_rate_limit: Annotated[int, Field(ge=0)] = Field(
        default=600,
        description="Requests per API key per minute; 0 turns the limit off. Counted per server process "
        "unless CITELINE_API_RATE_LIMIT_REDIS_URL names a Redis that every process shares.",
    )
    api_rate_limit_redis_url: str | None = Field(
        default=None,
        description="redis:// URL where every server process and replica counts each key's requests "
        "together (the broker's Redis will do); unset, each process counts its own.",
    )
    api_key_cache_seconds: Annotated[float, Field(ge=0, le=300)] = Field(
        default=5.0,
        description="Seconds a server trusts an API key it has checked before reading it again; a key "
        "revoked through another server is refused here within this time. 0 reads it on every request.",
    )
    api_max_generations: Annotated[int, Field(ge=1, le=256)] = Field(
        default=2, description="Answers generated at once per server process; more wait in a queue."
    )
    api_generation_queue: Annotated[int, Field(ge=0, le=10_000)] = Field(
        default=16, description="Answers that may wait for a free generation slot; beyond it, 503."
    )
    api_generation_wait: Annotated[float, Field(ge=0, le=3_600)] = Field(
        default=60.0, description="Seconds an answer waits in the queue before the request gets a 503."
    )
    api_max_generations_per_key: Annotated[int | None, Field(ge=1, le=10_256)] = Field(
        default=None,
        description="Answers one API key may have generating and waiting at once, per server process; "
        "beyond it, 429. Unset: the slots plus half the queue (rounded up), so a lone key keeps every slot "
        "busy and another key still finds the rest of the queue open.",
    )
    api_keep_alive_seconds: Annotated[float, Field(gt=0, le=3_600)] = Field(
        default=75.0,
        description="Seconds the server keeps an idle client connection open; longer than the idle "
        "timeout of a load balancer in front of it, so the balancer never reuses a connection the "
        "server is closing.",
    )
    api_worker_healthcheck_seconds: Annotated[int, Field(ge=1, le=3_600)] = Field(
        default=60,
        description="With --workers N, seconds a server process may leave the supervisor's health check "
        "unanswered before it is killed and replaced; it cannot answer while the local answering model "
        "holds the GIL, for seconds on a loaded machine (uvicorn's default of 5 s killed busy processes).",
    )
    api_heartbeat_seconds: Annotated[float, Field(gt=0, le=300)] = Field(
        default=10.0, description="A streamed answer sends a comment line after this many silent seconds."
    )
    log_format: Literal["text", "json"] = Field(
        default="text",
        description="citeline serve's log lines: text (uvicorn's lines), or json (one object a line, for a "
        "log collector).",
    )
    log_query_values: bool = Field(
        default=False,
        description="Keep query string values in the access log; by default they are replaced with "
        "'…', since GET /search?q= carries the question asked.",
    )

    @property
    def files_dir(self) -> Path:
        """The namespace's folder of stored originals: one per namespace, so a file's presence is
        decided by that namespace's catalog alone."""
        return self.data_dir.expanduser().resolve() / "files" / self.namespace

    @field_validator("chunk_overlap")
    @classmethod
    def _overlap_below_size(cls, value: int, info: ValidationInfo) -> int:
        # An overlap as large as the chunk never advances. Refused when the settings are read, as a
        # setting contradicting another (exit 78), not at the first ingest as a bad --chunk-overlap.
        size = info.data.get("chunk_size")
        if size is not None and value >= size:
            raise ValueError(f"chunk_overlap must be below the chunk size (CITELINE_CHUNK_SIZE, {size})")
        return value

    @field_validator("label_boost")
    @classmethod
    def _label_selectors(cls, value: dict[str, float]) -> dict[str, float]:
        # A key that selects nothing would boost nothing, silently: refused when the settings are read.
        for key in value:
            kind, colon, name = key.partition(":")
            if not colon or kind not in LABEL_KINDS:
                raise ValueError(
                    f"label_boost key {key!r} must be tag:<tag>, category:<category> or scope:<scope>"
                )
            parts = name.split("/") if kind == "category" else [name]
            if not any(part.strip() for part in parts):
                raise ValueError(f"label_boost key {key!r} names no {kind}")
            if kind != "category" and name != name.strip():
                # Tags and scopes never start or end with whitespace (retrieve/filters.py refuses them).
                raise ValueError(
                    f"label_boost key {key!r}: a {kind} does not start or end with whitespace "
                    f"(did you mean '{kind}:{name.strip()}'?)"
                )
        return value

    @field_validator("namespace")
    @classmethod
    def _namespace_is_identifier(cls, value: str) -> str:
        if not NAMESPACE_PATTERN.match(value):
            raise ValueError(
                f"namespace {value!r} must start with a lowercase letter and hold only a-z, 0-9 and _ "
                "(at most 41 characters)"
            )
        return value

    @field_validator("redis_url", "api_rate_limit_redis_url")
    @classmethod
    def _url_is_redis(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"{info.field_name} must be a redis://, rediss:// or unix:// URL")
        return value

    @field_validator("chroma_url")
    @classmethod
    def _url_is_http(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("chroma_url must be an http:// or https:// URL, e.g. http://localhost:8000")
        return value

    @field_validator("database_url")
    @classmethod
    def _url_is_postgres(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if not value.startswith(("postgresql://", "postgres://", "postgresql+psycopg://")):
            raise ValueError("database_url must be a postgresql:// URL")
        # Parsed now, so a malformed one (a port that is not a number) is named here, as a setting,
        # rather than failing every command later with a traceback from deep in SQLAlchemy.
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            make_url(value).port  # noqa: B018 - reading the port is the check
        except (ArgumentError, ValueError) as exc:
            raise ValueError(f"database_url is not a valid URL ({exc})") from None
        return value


def load_settings(**overrides: object) -> Settings:
    """The settings from the environment with ``overrides``; a :class:`ConfigError` naming each invalid
    setting by its variable, on one line (pydantic's own message spans several, ending in a URL), or
    an override that is no setting."""
    return Settings(**overrides)


@functools.cache
def _keywords() -> frozenset[str]:
    """The keywords :class:`Settings` takes: its fields' names, and the other names a field answers to."""
    names = set(Settings.model_fields)
    for info in Settings.model_fields.values():
        if isinstance(info.validation_alias, AliasChoices):
            names.update(choice for choice in info.validation_alias.choices if isinstance(choice, str))
        elif isinstance(info.validation_alias, str):
            names.add(info.validation_alias)
    return frozenset(names)


_UNPARSED_FIELD = re.compile(r'error parsing value for field "(\w+)"')


def describe_unparsed(exc: SettingsError) -> str:
    """A list or mapping setting whose value is not JSON, as ``CITELINE_NAME: ...``: pydantic-settings
    reads those as JSON before validating, and its error (``error parsing value for field ...``) ended
    the command in a traceback."""
    found = _UNPARSED_FIELD.search(str(exc))
    if found is None:
        return str(exc)
    field = found.group(1)
    name = f"CITELINE_{field.upper()}"
    got = os.environ.get(name)
    shown = "" if got is None or field in _SECRET_FIELDS else f" (got {got[:80]!r})"
    return (
        f"{name}: not JSON; a list or a mapping is written as JSON, e.g. "
        f'["patient", "study"] or {{"application/pdf": 1.0}}{shown}'
    )


#: Settings whose value an error never shows, and URLs whose password it masks.
_SECRET_FIELDS = frozenset({"openai_api_key", "anthropic_api_key", "chroma_api_key", "embed_api_key"})
_URL_FIELDS = frozenset(
    {"database_url", "redis_url", "chroma_url", "api_rate_limit_redis_url", "embed_base_url", "llm_base_url"}
)


def describe_invalid(exc: ValidationError) -> str:
    """Each problem of ``exc`` as ``CITELINE_NAME: message (got value)``, joined by ``; ``."""
    problems = []
    for error in exc.errors():
        loc = [str(part) for part in error.get("loc", ())]
        name = f"CITELINE_{loc[0].upper()}" if loc else "settings"
        where = ".".join([name, *loc[1:]])
        got = error.get("input")
        if loc and loc[0] in _SECRET_FIELDS:
            got = None  # an error line is printed and logged: a key or a password is never in it
        elif loc and loc[0] in _URL_FIELDS and isinstance(got, str):
            got = re.sub(r"(//[^:/@]*:)[^@/]*@", r"\1***@", got)
        shown = "" if isinstance(got, dict) or got is None else f" (got {str(got)[:80]!r})"
        problems.append(f"{where}: {error.get('msg', 'invalid')}{shown}")
    return "; ".join(problems)
