"""``GET/DELETE /conversations[/{id}]``: a key sees only its own conversations."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from citeline.api.deps import AccessDep, CitelineDep
from citeline.api.routes.links import with_download_links
from citeline.api.schemas import KEYED, ConversationList, ConversationWithMessages, answers
from citeline.chat.session import conversations, delete_conversation

router = APIRouter(prefix="/conversations", tags=["conversations"])


@router.get(
    "",
    summary="The key's live conversations, most recently updated first",
    response_model=None,
    responses=answers(ConversationList, *KEYED),
)
def list_conversations(
    cl: CitelineDep, access: AccessDep, limit: Annotated[int, Query(ge=1, le=500)] = 50
) -> dict[str, Any]:
    found = conversations(cl, access, limit=limit)
    return {"conversations": [c.as_dict() for c in found]}


@router.get(
    "/{conversation_id}",
    summary="One conversation with its messages and their citations, openable",
    response_model=None,
    responses=answers(ConversationWithMessages, *KEYED, 404),
)
def get_conversation(conversation_id: str, cl: CitelineDep, access: AccessDep) -> dict[str, Any]:
    info, messages = cl.conversation(conversation_id, access=access)
    shown = [m.as_dict() for m in messages]
    for message in shown:
        for citation in message["citations"]:
            if citation["available"]:
                with_download_links(citation)
    return {**info.as_dict(), "messages": shown}


@router.delete(
    "/{conversation_id}",
    status_code=204,
    summary="Delete a conversation and its messages",
    operation_id="delete_conversation",
    responses=answers(None, *KEYED, 404, status=204, description="Deleted."),
)
def remove_conversation(conversation_id: str, cl: CitelineDep, access: AccessDep) -> Response:
    delete_conversation(cl, conversation_id, access)
    return Response(status_code=204)
