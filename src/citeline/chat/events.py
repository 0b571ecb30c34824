"""What a conversation's turn streams before the answer's own events: which conversation, and the query
searched for the question (a follow-up is rewritten into a standalone one).

A turn streams :class:`TurnStart`, then the answer's events (:mod:`citeline.answer.events`): remote
clients learn the conversation id and the rewritten query from the stream itself.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from citeline.answer.events import Event
from citeline.chat.rewrite import Rewrite


@dataclass(frozen=True)
class TurnStart:
    """A turn begins: its conversation and number, the question, and how it became the search query."""

    conversation_id: uuid.UUID
    turn: int
    question: str
    rewrite: Rewrite

    def as_dict(self) -> dict[str, Any]:
        return {
            "type": "turn",
            "conversation_id": str(self.conversation_id),
            "turn": self.turn,
            "question": self.question,
            "query": self.rewrite.query,
            "rewrite": self.rewrite.method,
            "rewritten": self.rewrite.method != "unchanged",
            "rewrite_fell_back": self.rewrite.fell_back,
        }


ChatEvent = TurnStart | Event
"""Anything a conversation's turn streams."""
