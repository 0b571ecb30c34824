"""Links to the API's own routes, which only the shell knows (the library returns ids and pages)."""

from __future__ import annotations

import uuid


def file_url(document_id: uuid.UUID | str, page: int | None = None, version: int | None = None) -> str:
    """The stored original (of ``version``, else the current one), opened at ``page`` by viewers that
    understand ``#page=N`` (PDF viewers)."""
    url = f"/documents/{document_id}/file"
    if version is not None:
        url += f"?version={version}"
    return url if page is None else f"{url}#page={page}"
