"""Built-in LLM providers. Each module registers one ``provider:`` prefix."""

from __future__ import annotations


def register_builtins() -> None:
    """Register every built-in provider (imports stay inside each factory)."""
