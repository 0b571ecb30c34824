"""Load: turn a source (a file or an http(s) URL) into cleaned pages.

``load(source)`` picks the loader by file extension (or, for a file without one, by its first bytes)
and returns a :class:`~citeline.types.LoadedSource` whose pages are read lazily. Problems visible up
front (missing file, unsupported type, unreadable, encrypted or scanned PDF, empty or binary text) raise
:class:`~citeline.errors.LoadError` from ``load`` itself; later ones raise it while the pages are read.
"""

from __future__ import annotations

import codecs
import re
import stat
from collections.abc import Callable
from pathlib import Path

from citeline.errors import LoadError, UnsupportedTypeError
from citeline.load.html import load_html_file, load_url
from citeline.load.pdf import load_pdf, pdf_page_count
from citeline.load.table import load_csv
from citeline.load.text import load_markdown, load_text
from citeline.types import LoadedSource

__all__ = [
    "CONTENT_TYPES",
    "SUPPORTED_SUFFIXES",
    "content_type_of",
    "load",
    "load_url",
    "page_count",
    "short_type",
]

# Each extension's loader, and the content type it gives the sources it reads (a TSV is read as CSV).
_KINDS: dict[str, tuple[Callable[[Path], LoadedSource], str]] = {
    ".pdf": (load_pdf, "application/pdf"),
    ".txt": (load_text, "text/plain"),
    ".md": (load_markdown, "text/markdown"),
    ".markdown": (load_markdown, "text/markdown"),
    ".html": (load_html_file, "text/html"),
    ".htm": (load_html_file, "text/html"),
    ".csv": (load_csv, "text/csv"),
    ".tsv": (load_csv, "text/csv"),
}
SUPPORTED_SUFFIXES: tuple[str, ...] = tuple(sorted(_KINDS))
"""File extensions :func:`load` accepts (lower case, with the dot)."""
CONTENT_TYPES: tuple[str, ...] = tuple(sorted({kind for _, kind in _KINDS.values()}))
"""Every content type a loaded source can have (a web page is ``text/html``)."""


def short_type(content_type: str | None) -> str:
    """``pdf``, ``markdown``, ``html``, ``csv``, ``text``: the MIME type's subtype, for a narrow column
    (``docs list``) and as a search filter's shorthand."""
    subtype = (content_type or "").partition("/")[2].partition(";")[0]
    return "text" if subtype == "plain" else subtype


def content_type_of(name: str, path: Path | None = None) -> str | None:
    """The content type :func:`load` will give the file ``name``: by its extension, or for a name
    without one by the first bytes of ``path`` (its copy, an upload's stored original, named by its
    hash); None for an unsupported extension. What a version queued for building says it holds before
    it is read."""
    suffix = Path(name).suffix.lower()
    if not suffix and path is not None:
        return _sniff(path)[1]
    kind = _KINDS.get(suffix)
    return kind[1] if kind else None


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_SNIFF_BYTES = 1024


def _sniff(path: Path) -> tuple[Callable[[Path], LoadedSource], str]:
    """Choose a loader (and the content type it gives) for a file without an extension from its first
    bytes."""
    try:
        with path.open("rb") as file:
            head = file.read(_SNIFF_BYTES)
    except OSError as exc:
        raise LoadError(str(path), f"cannot read file ({exc.strerror or exc})") from exc
    if b"%PDF-" in head:
        return _KINDS[".pdf"]
    return _KINDS[".html"] if _HTML_START.match(_head_text(head)) else _KINDS[".txt"]


# What may come before a page's <!DOCTYPE html> or <html>: white space, an XML declaration (XHTML) and
# comments (Internet Explorer's "saved from url" mark, a generator's note).
_HTML_START = re.compile(r"\s*(?:<\?xml[^>]*>\s*|<!--.*?-->\s*)*<(?:!doctype\s+html|html[\s>])", re.I | re.S)


def _head_text(head: bytes) -> str:
    """The first bytes of a file as text, enough to tell HTML by: UTF-16 after its byte-order mark,
    else byte for byte (the markup is ASCII in every other encoding a page is saved in)."""
    for bom, encoding in ((codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be")):
        if head.startswith(bom):
            return head[len(bom) :].decode(encoding, errors="ignore")
    return head.removeprefix(codecs.BOM_UTF8).decode("latin-1")


def page_count(path: Path) -> int | None:
    """How many pages the file at ``path`` will give, when that is known before any is read: a PDF's,
    from its page tree. None for other types (their pages are known only as they are read) and for a
    file that cannot be read (:func:`load` says why)."""
    kind = _KINDS.get(path.suffix.lower())
    try:
        loader = kind[0] if kind else _sniff(path)[0]
    except LoadError:
        return None
    return pdf_page_count(path) if loader is load_pdf else None


def load(source: str | Path, *, allow_private: bool = False) -> LoadedSource:
    """Load ``source``, a file path or an http(s) URL, as a :class:`LoadedSource`.

    Supported files: PDF, plain text, Markdown, HTML and CSV/TSV (see :data:`SUPPORTED_SUFFIXES`); a
    file with no extension is recognised from its content. A ``str`` of the form ``scheme://...`` is a
    URL; only http and https are fetched, and hosts on loopback, private, link-local, multicast or
    reserved addresses are refused unless ``allow_private`` is true.

    Raises :class:`UnsupportedTypeError` for an unsupported extension or URL scheme, and
    :class:`LoadError` (naming the source and the reason) for everything else that goes wrong.
    """
    if isinstance(source, str) and _URL.match(source):
        return load_url(source, allow_private=allow_private)
    path = Path(source)
    name = str(source)
    try:
        info = path.stat()
    except FileNotFoundError as exc:
        raise LoadError(name, "file not found") from exc
    except PermissionError as exc:
        raise LoadError(name, "permission denied") from exc
    except OSError as exc:
        raise LoadError(name, f"cannot read file ({exc.strerror or exc})") from exc
    if stat.S_ISDIR(info.st_mode):
        raise LoadError(name, "is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise LoadError(name, "not a regular file")
    suffix = path.suffix.lower()
    kind = _KINDS.get(suffix)
    if kind is None and suffix:
        raise UnsupportedTypeError(
            name, f"unsupported file type {suffix!r}; supported: {', '.join(SUPPORTED_SUFFIXES)}"
        )
    if info.st_size == 0:
        raise LoadError(name, "empty file")
    return (kind or _sniff(path))[0](path)
