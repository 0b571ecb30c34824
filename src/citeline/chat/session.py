"""A conversation, asked turn by turn: rewrite -> search -> add cited history -> answer -> store the turn.

:class:`ChatSession` holds no conversation state of its own: each :meth:`ChatSession.ask` reads the
stored turns, so any process (CLI, API replica, worker) can continue any conversation, and citation
numbers stay conversation-wide because they are rebuilt from what earlier answers cited.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from citeline.access import FULL_ACCESS, Access
from citeline.answer import CitationNumbering, Complete, answer_stream
from citeline.answer.llm import LLM, LLMS, GenerationOptions
from citeline.answer.prompt import system_prompt
from citeline.chat import store
from citeline.chat.events import ChatEvent, TurnStart
from citeline.chat.history import as_cited, merge, remembered_hits
from citeline.chat.rewrite import Rewrite, asked_of_model, rewrite
from citeline.chat.store import ConversationInfo, MessageInfo, Turn
from citeline.checks import refuse_nul
from citeline.errors import InvalidRequestError
from citeline.metrics import counted_answer
from citeline.registry import Capability
from citeline.retrieve.filters import Filters
from citeline.retrieve.search import Explain, Hit, SearchRequest, Timings
from citeline.settings import Settings

if TYPE_CHECKING:
    from citeline.engine import Citeline


@dataclass
class TurnExplain:
    """How a turn found its passages (``citeline ask --explain``): its search's stages and plan, as
    ``citeline search --explain`` shows them, and the turn's own stages before the answer, in
    milliseconds. The answer's stages (prompt, generation, checking the citations) are
    :attr:`Complete.timings <citeline.answer.Complete.timings>`."""

    search: Timings = field(default_factory=Timings)
    plan: Explain = field(default_factory=Explain)
    #: Reading the conversation's earlier turns (0 for its first question: nothing to read).
    history_ms: float = 0.0
    #: Turning a follow-up into a search query (a model call when ``follow_up_rewrite`` asks for one).
    rewrite_ms: float = 0.0
    #: The whole search, its stages and what lies between them.
    search_ms: float = 0.0
    #: The search and slotting in the chunks earlier answers cited: what the answer waited for.
    evidence_ms: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "search": self.plan.as_dict(self.search, self.search_ms),
            "turn_ms": {
                "history": self.history_ms,
                "rewrite": self.rewrite_ms,
                "search": self.search_ms,
                "evidence": self.evidence_ms,
            },
        }


class ChatSession:
    """One conversation of one user, answered from one :class:`Citeline` namespace.

    ``access`` is the caller's grant: its ``user_id`` owns the conversation, and its scopes bound every
    search the conversation makes (a request's filters can narrow them, never widen them). ``llm``
    answers, and rewrites follow-ups unless the ``follow_up_rewrite`` setting says ``heuristic``;
    ``None`` means the extractive answerer and the heuristic rewriter. The caller owns ``llm`` and
    closes it.
    """

    def __init__(
        self,
        cl: Citeline,
        conversation: ConversationInfo,
        *,
        llm: LLM | None,
        access: Access = FULL_ACCESS,
        options: GenerationOptions | None = None,
    ) -> None:
        self.cl = cl
        self.conversation = conversation
        self.access = access
        self.llm = llm
        self.options = options or GenerationOptions.from_settings(cl.settings)
        self.last_rewrite: Rewrite | None = None
        """How the latest question was turned into a query (set before its search runs)."""
        # Set by start(): a conversation this session made holds no turn until it stores one, so its
        # first question reads nothing back from the database before searching.
        self._empty = False

    @classmethod
    def start(
        cls,
        cl: Citeline,
        *,
        llm: LLM | None,
        access: Access = FULL_ACCESS,
        persona: str | None = None,
        title: str | None = None,
        options: GenerationOptions | None = None,
    ) -> ChatSession:
        """A new conversation of ``access.user_id``. Expired conversations of every user are deleted on
        the way."""
        refuse_nul(title, "title")
        persona = persona or cl.settings.persona
        system_prompt(persona)  # an unknown persona fails now, not at every question
        with cl.engine.begin() as conn:
            expired = store.expire_conversations(conn)
            conversation = store.create_conversation(
                conn, user_id=access.user_id, persona=persona, ttl=_ttl(cl), title=title
            )
        if expired:
            cl.prune_superseded()
        session = cls(cl, conversation, llm=llm, access=access, options=options)
        session._empty = True
        return session

    @classmethod
    def resume(
        cls,
        cl: Citeline,
        conversation_id: str | uuid.UUID,
        *,
        llm: LLM | None,
        access: Access = FULL_ACCESS,
        options: GenerationOptions | None = None,
    ) -> ChatSession:
        """An existing conversation of ``access.user_id``; another user's is :class:`NotFoundError`."""
        with cl.engine.connect() as conn:
            conversation = store.get_conversation(conn, store.parse_id(conversation_id), access.user_id)
        return cls(cl, conversation, llm=llm, access=access, options=options)

    @classmethod
    def check(
        cls,
        cl: Citeline,
        question: str,
        conversation_id: str | uuid.UUID | None = None,
        *,
        access: Access = FULL_ACCESS,
        persona: str | None = None,
    ) -> None:
        """Refuse now what :meth:`start` or :meth:`resume` and :meth:`ask` would refuse before the model
        is asked: a blank question or one holding a NUL, an unknown persona, a conversation that is not
        ``access.user_id``'s. A server checks a turn with it before the turn waits for an answer slot,
        so that a request that could never be answered is not held up by, or counted with, answers."""
        refuse_nul(question, "question")
        if not question.strip():
            raise InvalidRequestError("the question is empty")
        if conversation_id is None:
            system_prompt(persona or cl.settings.persona)
            return
        with cl.engine.connect() as conn:
            store.get_conversation(conn, store.parse_id(conversation_id), access.user_id)

    @property
    def id(self) -> uuid.UUID:
        return self.conversation.id

    def messages(self) -> list[MessageInfo]:
        """The stored messages, oldest first."""
        with self.cl.engine.connect() as conn:
            store.get_conversation(conn, self.id, self.conversation.user_id)
            return store.messages(conn, self.id)

    def history(self) -> list[Turn]:
        """The completed turns, oldest first."""
        return store.turns(self.messages())

    def ask(
        self,
        question: str,
        *,
        filters: Filters | None = None,
        top_k: int | None = None,
        explain: TurnExplain | None = None,
    ) -> AsyncGenerator[ChatEvent, None]:
        """Answer ``question`` in this conversation: :class:`TurnStart`, then the answer's events.

        ``filters`` (scopes, category, tags...) bound both the search and the earlier-cited chunks that
        join it; ``top_k`` is the number of fresh passages (default: the ``answer_passages`` setting).
        ``explain``, when given, is filled with how the turn found its passages before the answer starts.
        The turn is stored before :class:`Complete` is passed on, so a caller that saw it can ask the
        next question at once. A turn that ends in an error, or that the caller stops reading before
        :class:`Complete`, is not stored. The answer is counted in :mod:`citeline.metrics`.
        """
        return counted_answer(self._ask(question, filters=filters, top_k=top_k, explain=explain))

    async def _ask(
        self, question: str, *, filters: Filters | None, top_k: int | None, explain: TurnExplain | None
    ) -> AsyncGenerator[ChatEvent, None]:
        refuse_nul(question, "question")  # before anything of the turn is stored
        question = question.strip()
        if not question:
            # A conversation started for this question holds no turn, so it is not listed
            # (store.list_conversations): the error need not name it.
            if self._empty:
                raise InvalidRequestError("the question is empty")
            raise InvalidRequestError(f"the question to conversation {self.id} is empty")
        filters = self.access.restrict(filters or Filters())
        started = time.perf_counter()
        if self._empty:
            # Nothing to read back, and a first question is never rewritten (no model call).
            history: list[Turn] = []
            read = started
            self.last_rewrite = rewrite(question, history, llm=None)
        else:
            history = await asyncio.to_thread(self.history)
            read = time.perf_counter()
            rewriter = self.llm if _rewrites_with_llm(self.cl.settings) else None
            self.last_rewrite = await asyncio.to_thread(
                rewrite, question, history, llm=rewriter, options=self.options
            )
        if explain is not None:
            explain.history_ms = (read - started) * 1e3
            explain.rewrite_ms = (time.perf_counter() - read) * 1e3
        query = self.last_rewrite.query
        yield TurnStart(self.id, len(history) + 1, question, self.last_rewrite)
        searching = time.perf_counter()
        evidence = await asyncio.to_thread(self.evidence, query, history, filters, top_k, explain=explain)
        if explain is not None:
            explain.evidence_ms = (time.perf_counter() - searching) * 1e3
        numbering = CitationNumbering.from_chunk_ids(store.citation_order(history))
        numbered_before = len(numbering)
        async for event in answer_stream(
            query,
            evidence,
            llm=self.llm,
            embedder=self.cl.answer_embedder,
            numbering=numbering,
            persona=self.conversation.persona,
            options=self.options,
            max_evidence_tokens=self.cl.settings.answer_evidence_tokens or None,
            min_similarity=self.cl.settings.answer_min_similarity,
            # A rewrite, the heuristic's or a model's, is a search query: the topic it borrowed from earlier
            # turns made the earlier topic's passages relevant to it whatever the user asked ("What are the
            # risks?" searched as the model's "elastic stop nut risks" quoted the nut again), and a keyword
            # query is no claim ("elastic stop nut risks" got "Yes: the sources support this claim"). So
            # the evidence must hold the user's own words, and the claim judged is what the user said.
            claim_text=question,
            # The model is asked a question, not the search query: "... (prime centrifugal pump)".
            model_question=asked_of_model(question, self.last_rewrite),
        ):
            if isinstance(event, Complete):
                cited = _cited_in_number_order(event, numbering, numbered_before)
                await asyncio.to_thread(self._store, question, query, event, cited)
            yield event

    def evidence(
        self,
        query: str,
        history: Sequence[Turn],
        filters: Filters,
        top_k: int | None = None,
        *,
        explain: TurnExplain | None = None,
    ) -> list[Hit]:
        """Fresh hits for ``query`` with the chunks cited in ``history`` slotted in (see chat.history);
        ``explain``, when given, takes the search's stages, plan and time."""
        settings = self.cl.settings
        start = time.perf_counter()
        fresh = self.cl.search(
            SearchRequest(query=query, filters=filters, top_k=top_k or settings.answer_passages),
            access=self.access,
            timings=None if explain is None else explain.search,
            explain=None if explain is None else explain.plan,
        )
        if explain is not None:
            explain.search_ms = (time.perf_counter() - start) * 1e3
        cited = store.recently_cited(history)
        if not cited:
            return fresh
        with self.cl.engine.connect() as conn:
            fresh = as_cited(conn, fresh, cited)
            if settings.history_chunks == 0:
                return fresh
            # The vector the search above embedded, of the model the search used (the served one:
            # during a model migration the configured embedder is another).
            remembered = remembered_hits(
                conn,
                cited,
                self.cl.query_vector(query),
                model=self.cl.query_embedder.model_id,
                filters=self.access.restrict(filters),
                limit=settings.history_chunks,
                vector_index=self.cl.vector_index,
                exclude={h.chunk_id for h in fresh},
                max_distance=settings.distance_threshold,
            )
        return merge(fresh, remembered)

    def _store(self, question: str, query: str, complete: Complete, cited: list[int]) -> None:
        user_id = self.conversation.user_id
        shown = complete.as_dict()
        checks = {key: shown[key] for key in ("citations", "unsupported", "evidence_missing")}
        with self.cl.engine.begin() as conn:
            store.append_turn(
                conn,
                self.id,
                user_id,
                question=question,
                standalone_query=query,
                answer=complete.answer,
                cited_chunk_ids=cited,
                provider=complete.provider,
                ttl=_ttl(self.cl),
                checks=checks,
            )
            # The title and expiry have moved; callers showing them should not see stale ones.
            self.conversation = store.get_conversation(conn, self.id, user_id)
        self._empty = False


def conversations(cl: Citeline, access: Access = FULL_ACCESS, *, limit: int = 50) -> list[ConversationInfo]:
    """The caller's live conversations, most recently updated first."""
    with cl.engine.connect() as conn:
        return store.list_conversations(conn, access.user_id, limit=limit)


def delete_conversation(cl: Citeline, conversation_id: str | uuid.UUID, access: Access = FULL_ACCESS) -> None:
    """Delete one of the caller's conversations with its messages, and the replaced document versions
    that only it cited."""
    with cl.engine.begin() as conn:
        store.delete_conversation(conn, store.parse_id(conversation_id), access.user_id)
    cl.prune_superseded()


def expire_conversations(cl: Citeline) -> int:
    """Delete every expired conversation, and the replaced document versions that only they cited;
    returns how many conversations (for a periodic worker task)."""
    with cl.engine.begin() as conn:
        expired = store.expire_conversations(conn)
    if expired:
        cl.prune_superseded()
    return expired


def _cited_in_number_order(
    complete: Complete, numbering: CitationNumbering, numbered_before: int
) -> list[int]:
    """What the turn's message stores so that replaying the messages rebuilds ``numbering`` exactly.

    That is the chunks the answer cites, plus any that gained a number during the answer without
    surviving into its citations: left out, every later number would shift by one on rebuilding.
    """
    order = {chunk_id: n for n, chunk_id in enumerate(numbering.chunk_ids)}
    cited = set(complete.cited_chunk_ids) | set(numbering.chunk_ids[numbered_before:])
    return sorted(cited, key=order.__getitem__)


def _ttl(cl: Citeline) -> timedelta:
    return timedelta(days=cl.settings.conversation_ttl_days)


def _rewrites_with_llm(settings: Settings) -> bool:
    mode = settings.follow_up_rewrite
    if mode == "auto":
        return settings.llm == "extractive" or Capability.FOLLOW_UP_REWRITE in LLMS.capabilities(settings.llm)
    return mode == "llm"
