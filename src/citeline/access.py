"""Access: who may read what. A value the library enforces on every read, whichever shell asks.

A grant is either *admin* (everything) or *reader* bound to a set of scopes. A reader sees the
documents that share one of its scopes and the universal documents (those with no scope). A request
may narrow a reader's scopes, never widen them: the scopes a search asks for are intersected with the
grant's, and an empty intersection means universal documents only, never everything.

Every entry point of :class:`citeline.engine.Citeline` that returns documents, chunks, hits,
citations, conversations or stats takes an :class:`Access`; a document outside it is "not found".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from citeline.checks import refuse_nul
from citeline.errors import InvalidRequestError
from citeline.retrieve.filters import Filters

LOCAL_USER = "local"
"""The user of a single-user install (the CLI, a script); servers name the caller's key instead."""


class Role(StrEnum):
    ADMIN = "admin"
    READER = "reader"


@dataclass(frozen=True)
class Access:
    """What one caller may read, and whose conversations are theirs.

    ``scopes`` None means every scope (admins, and readers created for all scopes); a set, possibly
    empty, bounds what the caller sees to those scopes plus the universal documents.
    ``user_id`` owns the caller's conversations.
    """

    role: Role = Role.ADMIN
    scopes: frozenset[str] | None = None
    user_id: str = LOCAL_USER

    def __post_init__(self) -> None:
        # The user id owns conversations and the scopes filter every read: both reach the database.
        refuse_nul(self, "access")
        if self.role is Role.ADMIN and self.scopes is not None:
            raise InvalidRequestError("an admin grant covers every scope; it cannot be bound to scopes")
        if not self.user_id:
            raise InvalidRequestError("an access grant needs a user id")

    @classmethod
    def admin(cls, user_id: str = LOCAL_USER) -> Access:
        """Everything: every document, every action."""
        return cls(Role.ADMIN, None, user_id)

    @classmethod
    def reader(cls, scopes: Iterable[str] | None, user_id: str = LOCAL_USER) -> Access:
        """Read-only, bounded to ``scopes`` (plus universal documents); None for every scope."""
        return cls(Role.READER, None if scopes is None else frozenset(scopes), user_id)

    @property
    def is_admin(self) -> bool:
        return self.role is Role.ADMIN

    @property
    def unrestricted(self) -> bool:
        """Whether this grant sees every document."""
        return self.scopes is None

    def restrict(self, filters: Filters) -> Filters:
        """``filters`` narrowed to this grant: the requested scopes intersected with the granted ones.

        No requested scopes means all granted ones; an empty intersection means universal only.
        """
        if self.scopes is None:
            return filters
        wanted = self.scopes if filters.scopes is None else self.scopes & set(filters.scopes)
        return replace(filters, scopes=tuple(sorted(wanted)))

    def sees(self, document_scopes: Sequence[str]) -> bool:
        """Whether a document carrying ``document_scopes`` is visible to this grant."""
        return self.scopes is None or not document_scopes or not self.scopes.isdisjoint(document_scopes)

    def sql(self, alias: str = "d") -> tuple[str, dict[str, Any]]:
        """A SQL condition on the documents table (``alias``) that keeps what this grant sees."""
        if self.scopes is None:
            return "TRUE", {}
        if not self.scopes:
            return f"cardinality({alias}.scopes) = 0", {}
        return (
            f"(cardinality({alias}.scopes) = 0 OR {alias}.scopes && CAST(:access_scopes AS text[]))",
            {"access_scopes": sorted(self.scopes)},
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "role": self.role.value,
            "scopes": None if self.scopes is None else sorted(self.scopes),
            "user_id": self.user_id,
        }


FULL_ACCESS = Access.admin()
"""The grant of a single-user install: the CLI and library scripts that own their store."""
