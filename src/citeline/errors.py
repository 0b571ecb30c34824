"""One error hierarchy for the whole library.

Each error says what went wrong, for which document or request, and what to do. Every class carries the
HTTP status a future API returns for it and the exit code the CLI returns, so shells never guess.
"""

from __future__ import annotations


class CitelineError(Exception):
    """Base of every error citeline raises on purpose."""

    http_status: int = 500
    exit_code: int = 1


class ConfigError(CitelineError):
    """A setting is missing, malformed or contradicts another."""

    http_status = 500
    exit_code = 78  # EX_CONFIG


class InvalidRequestError(CitelineError):
    """A request (search, ingest options) is malformed; the message says which field and why."""

    http_status = 422
    exit_code = 2

    def __init__(self, message: str, *, http_status: int = 422) -> None:
        # 400 for a request whose HTTP itself is ambiguous (two Authorization headers), where no field
        # of it can be read; 422 for every request that is read and refused.
        super().__init__(message)
        self.http_status = http_status


class NotFoundError(CitelineError):
    """A document, chunk or namespace that was asked for does not exist."""

    http_status = 404
    exit_code = 4


class LoadError(CitelineError):
    """A source could not be turned into pages. Always names the source and the reason."""

    http_status = 422
    exit_code = 65  # EX_DATAERR

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"{source}: {reason}")
        self.source = source
        self.reason = reason


class UnsupportedTypeError(LoadError):
    """The source's type is not one citeline can load."""

    http_status = 415


class EmbeddingError(CitelineError):
    """The embedding model could not be loaded or run."""

    http_status = 503
    exit_code = 69  # EX_UNAVAILABLE


class ModelMismatchError(CitelineError):
    """A query would compare vectors from two different embedding models."""

    http_status = 409
    exit_code = 3


class StoreError(CitelineError):
    """The database could not be reached, started or migrated."""

    http_status = 503
    exit_code = 69


class ExtensionMissingError(StoreError):
    """The PostgreSQL server lacks pgvector."""


class GenerationError(CitelineError):
    """A language model could not be loaded, reached or run; the message names the provider."""

    http_status = 502
    exit_code = 69


class AuthenticationError(CitelineError):
    """A request carried no API key, or one that is unknown or revoked."""

    http_status = 401
    exit_code = 77  # EX_NOPERM


class AccessDeniedError(CitelineError):
    """The caller's grant does not allow this action (a reader asking to write, say)."""

    http_status = 403
    exit_code = 77  # EX_NOPERM


class LimitExceededError(CitelineError):
    """A request is over one of the configured limits; the message names the limit and its setting."""

    http_status = 413
    exit_code = 2

    def __init__(self, message: str, *, http_status: int = 413, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.retry_after = retry_after


class ConflictError(CitelineError):
    """The request conflicts with the document's current state (cancelling a finished job, say)."""

    http_status = 409
    exit_code = 3


class JobStoppedError(CitelineError):
    """An ingestion job was told to stop (cancelled, or over its time limit); the message says why."""

    http_status = 409
    exit_code = 75  # EX_TEMPFAIL


class ClosedError(CitelineError):
    """The :class:`~citeline.engine.Citeline` was closed: it opens nothing again. Make another one."""

    http_status = 503  # a server shutting down
    exit_code = 70  # EX_SOFTWARE: a program used what it had closed
