"""Links to the API's own routes, which only the shell knows (the library returns ids and pages).

Every link to a passage is built here, so that each one opens: the stored original where citeline
keeps one, else (a web page, of which it keeps the text only) the page's text as citeline holds it.
"""

from __future__ import annotations

import uuid
from typing import Any


def file_url(document_id: uuid.UUID | str, page: int | None = None, version: int | None = None) -> str:
    """The stored original (of ``version``, else the current one), opened at ``page`` by viewers that
    understand ``#page=N`` (PDF viewers)."""
    url = f"/documents/{document_id}/file"
    if version is not None:
        url += f"?version={version}"
    return url if page is None else f"{url}#page={page}"


def page_text_url(document_id: uuid.UUID | str, page: int, version: int | None = None) -> str:
    """The text of ``page`` as citeline keeps it (of ``version``, else the current one)."""
    url = f"/documents/{document_id}/pages/{page}"
    return url if version is None else f"{url}?version={version}"


def passage_url(
    document_id: uuid.UUID | str, page: int, version: int | None = None, *, has_original: bool
) -> str:
    """Where a reader opens a passage at ``page``: the stored original, or for a document citeline keeps
    no original of (a web page), the page's text. Both serve ``version`` while it is kept."""
    if has_original:
        return file_url(document_id, page, version)
    return page_text_url(document_id, page, version)


def with_download_links(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a passage or citation as JSON, with ``document_id``, ``page``, ``version`` and
    ``has_original``) with a ``download_url`` on it and on each copy it names in ``also_in``, in place.
    Pinned to the version cited: the link keeps opening what was cited after a re-ingest."""
    data["download_url"] = passage_url(
        data["document_id"], data["page"], data["version"], has_original=data["has_original"]
    )
    for copy in data.get("also_in", ()):
        copy["download_url"] = passage_url(
            copy["document_id"], copy["page"], copy["version"], has_original=copy["has_original"]
        )
    return data
