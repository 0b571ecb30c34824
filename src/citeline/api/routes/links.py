"""Links to the API's own routes, which only the shell knows (the library returns ids and pages)."""

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


def with_download_links(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a passage or citation as JSON, with ``document_id``, ``page`` and ``version``) with a
    ``download_url`` on it and on each copy it names in ``also_in``, in place. Pinned to the version
    cited: the link keeps opening what was cited after a re-ingest."""
    data["download_url"] = file_url(data["document_id"], data.get("page"), data.get("version"))
    for copy in data.get("also_in", ()):
        copy["download_url"] = file_url(copy["document_id"], copy["page"], copy["version"])
    return data
