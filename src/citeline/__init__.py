"""citeline: an evidence engine.

Documents go in (load -> split -> embed -> index); questions come out as ranked, citable passages
(retrieve -> fuse) and cited answers. The library is the product: the CLI, the API, the web pages and
the workers are thin shells over it.

A program embedding citeline imports what it needs from here (docs/python.md)::

    from citeline import Citeline, Filters, IngestOptions, SearchRequest

The names load their modules on first use (PEP 562), so ``import citeline`` alone loads no model
runtime and no database driver: the CLI's ``--help`` and a program reading ``__version__`` stay fast.
"""

import importlib
import os
from typing import TYPE_CHECKING

# onnxruntime (1.29 and later) sends usage telemetry from Linux to Microsoft's event collector and
# keeps a device id and an event queue under ~/.cache/Microsoft. citeline promises no network at run
# time except to services the user configured, so it opts out before any module imports onnxruntime:
# the runtime reads this variable once, when it is imported, and later calls cannot undo what that
# import already wrote. A user who sets the variable themselves keeps their choice.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

__version__ = "0.1.0"

if TYPE_CHECKING:
    from citeline.access import Access, Role
    from citeline.answer.citations import Citation
    from citeline.answer.events import (
        CitationEvent,
        Complete,
        Error,
        Event,
        Start,
        Token,
        UnsupportedClaim,
    )
    from citeline.answer.prompt import Passage
    from citeline.chat.events import ChatEvent, TurnStart
    from citeline.chat.session import ChatSession
    from citeline.chat.store import ConversationInfo, MessageInfo
    from citeline.engine import Citeline
    from citeline.errors import (
        AccessDeniedError,
        AuthenticationError,
        CitelineError,
        ClosedError,
        ConfigError,
        ConflictError,
        EmbeddingError,
        ExtensionMissingError,
        GenerationError,
        InvalidRequestError,
        JobStoppedError,
        LimitExceededError,
        LoadError,
        ModelMismatchError,
        NotFoundError,
        StoreError,
        UnsupportedTypeError,
    )
    from citeline.ingest import IngestOptions, IngestResult, Outcome
    from citeline.retrieve.filters import Filters
    from citeline.retrieve.search import Hit, SearchRequest
    from citeline.settings import Fusion, Settings, load_settings
    from citeline.store.catalog import DocumentInfo

#: Each public name and the module that defines it: the one place a name is added.
_MODULES = {
    "Citeline": "citeline.engine",
    "Settings": "citeline.settings",
    "load_settings": "citeline.settings",
    "Fusion": "citeline.settings",
    "Access": "citeline.access",
    "Role": "citeline.access",
    "IngestOptions": "citeline.ingest",
    "IngestResult": "citeline.ingest",
    "Outcome": "citeline.ingest",
    "DocumentInfo": "citeline.store.catalog",
    "SearchRequest": "citeline.retrieve.search",
    "Hit": "citeline.retrieve.search",
    "Filters": "citeline.retrieve.filters",
    "ChatSession": "citeline.chat.session",
    "ConversationInfo": "citeline.chat.store",
    "MessageInfo": "citeline.chat.store",
    "ChatEvent": "citeline.chat.events",
    "TurnStart": "citeline.chat.events",
    "Event": "citeline.answer.events",
    "Start": "citeline.answer.events",
    "Token": "citeline.answer.events",
    "CitationEvent": "citeline.answer.events",
    "UnsupportedClaim": "citeline.answer.events",
    "Complete": "citeline.answer.events",
    "Error": "citeline.answer.events",
    "Citation": "citeline.answer.citations",
    "Passage": "citeline.answer.prompt",
    **{
        name: "citeline.errors"
        for name in (
            "CitelineError",
            "ConfigError",
            "InvalidRequestError",
            "NotFoundError",
            "LoadError",
            "UnsupportedTypeError",
            "EmbeddingError",
            "ModelMismatchError",
            "StoreError",
            "ExtensionMissingError",
            "GenerationError",
            "AuthenticationError",
            "AccessDeniedError",
            "LimitExceededError",
            "ConflictError",
            "JobStoppedError",
            "ClosedError",
        )
    },
}

__all__ = [
    "Access",
    "AccessDeniedError",
    "AuthenticationError",
    "ChatEvent",
    "ChatSession",
    "Citation",
    "CitationEvent",
    "Citeline",
    "CitelineError",
    "ClosedError",
    "Complete",
    "ConfigError",
    "ConflictError",
    "ConversationInfo",
    "DocumentInfo",
    "EmbeddingError",
    "Error",
    "Event",
    "ExtensionMissingError",
    "Filters",
    "Fusion",
    "GenerationError",
    "Hit",
    "IngestOptions",
    "IngestResult",
    "InvalidRequestError",
    "JobStoppedError",
    "LimitExceededError",
    "LoadError",
    "MessageInfo",
    "ModelMismatchError",
    "NotFoundError",
    "Outcome",
    "Passage",
    "Role",
    "SearchRequest",
    "Settings",
    "Start",
    "StoreError",
    "Token",
    "TurnStart",
    "UnsupportedClaim",
    "UnsupportedTypeError",
    "__version__",
    "load_settings",
]


def _load(name: str) -> object:
    """The public ``name``, imported from its module on first use and kept in this module's globals."""
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


# Hidden from type checkers, which read the names from the imports above: a module __getattr__ would
# make them accept any name, a misspelt one included, as Any.
if not TYPE_CHECKING:
    __getattr__ = _load
