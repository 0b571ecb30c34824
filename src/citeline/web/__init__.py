"""Web: the static front-end (the citation viewer and its PDF.js assets) that ``citeline serve`` serves.

The files live in ``static/``: ``viewer.js`` and ``viewer.css`` are written here; ``vendor/pdfjs/`` is
copied from the npm package ``pdfjs-dist`` by ``make web`` (pinned by ``web/package-lock.json``), so
nothing is fetched from a CDN or at run time.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["static_dir"]


def static_dir() -> Path:
    """The directory of static files to serve (``viewer.js``, ``viewer.css``, ``vendor/pdfjs/``)."""
    return Path(__file__).parent / "static"
