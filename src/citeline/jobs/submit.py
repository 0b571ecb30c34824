"""Submitting documents as jobs: store the original, register its version, leave it to a runner.

Submitting answers at once, whatever ingestion then takes: the original is streamed to the store
(content-addressed, within ``upload_max_bytes``), the version row is created ``queued`` (or ``pending``
when not asked to index) with the document's own labels and chunking, and a runner builds it later
from the stored original. Content, model and chunking equal to the active version's is a no-op (its
labels are updated if they differ).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import tempfile
import unicodedata
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlsplit
from urllib.request import url2pathname

import sqlalchemy as sa

from citeline.checks import refuse_nul
from citeline.errors import ConflictError, InvalidRequestError, LimitExceededError, UnsupportedTypeError
from citeline.ingest import IngestOptions, Outcome, check_chunking
from citeline.load import SUPPORTED_SUFFIXES, content_type_of
from citeline.load.url import check_url
from citeline.settings import Settings
from citeline.store import catalog
from citeline.store.catalog import DocumentInfo, VersionRequest, VersionSpec, VersionStart
from citeline.store.models import Status

_BLOCK = 1 << 20


@dataclass(frozen=True)
class Upload:
    """A file sent to citeline: its name (whose extension picks the loader) and its bytes."""

    name: str
    stream: BinaryIO

    def __post_init__(self) -> None:
        refuse_nul(self.name, "upload.name", surrogates=False)  # stored as the document's; cleaned


@dataclass(frozen=True)
class Submission:
    """What submitting did: a new version ``queued`` or ``pending``, or an unchanged/relabelled one.

    ``same_content`` names the other documents already holding the same bytes (a file uploaded again
    under another name, or for another scope): it is stored all the same, and search shows their
    passages once (``Hit.also_in``), but whoever uploads it can relabel the one stored instead.
    """

    document: DocumentInfo
    outcome: Outcome | Status
    same_content: tuple[catalog.SameContent, ...] = ()

    @property
    def created(self) -> bool:
        return self.outcome in (Status.QUEUED, Status.PENDING)


def store_upload(upload: Upload, files_dir: Path, *, max_bytes: int) -> tuple[Path, str, Path | None]:
    """Stream ``upload`` into the store of originals; its stored path, content hash and spare copy.

    Refuses an unsupported extension (a name without one is read by its first bytes) before reading, and
    an upload over ``max_bytes`` while reading (nothing of it is kept). Originals are stored by their
    hash: when one with these bytes is stored already, this upload's copy is returned as the spare, kept
    until its version is registered (:func:`settle_spare`): until then no version of this upload holds the
    stored file, and a cancel of another version with the same bytes may remove it.
    """
    suffix = Path(upload.name).suffix.lower()
    # A name without an extension is recognised from its first bytes when built (citeline.load), as a
    # file given to `citeline ingest` is.
    if suffix and suffix not in SUPPORTED_SUFFIXES:
        supported = ", ".join(SUPPORTED_SUFFIXES)
        raise UnsupportedTypeError(
            upload.name, f"unsupported file type {suffix or '(none)'!r}; supported: {supported}"
        )
    files_dir.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    size = 0
    with tempfile.NamedTemporaryFile(dir=files_dir, suffix=".part", delete=False) as part:
        partial = Path(part.name)
        try:
            while block := upload.stream.read(_BLOCK):
                size += len(block)
                if size > max_bytes:
                    raise LimitExceededError(
                        f"{upload.name}: the upload is over {max_bytes} bytes (CITELINE_UPLOAD_MAX_BYTES)"
                    )
                digest.update(block)
                part.write(block)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
    content = digest.hexdigest()
    stored = files_dir / content[:2] / f"{content}{suffix}"
    stored.parent.mkdir(parents=True, exist_ok=True)
    if stored.exists():
        return stored, content, partial
    shutil.move(partial, stored)
    return stored, content, None


def settle_spare(stored: Path, spare: Path | None) -> None:
    """Once an upload's version is registered: put its spare copy (:func:`store_upload`) in place if
    the stored file went meanwhile, else drop it."""
    if spare is None:
        return
    if stored.exists():
        spare.unlink(missing_ok=True)
    else:
        spare.replace(stored)


#: The longest key an upload is sent under: a path in a deep folder fits, a file's content does not.
SOURCE_MAX_CHARS = 1024


def keyed_source(key: str) -> str:
    """The source of the document uploaded under ``key`` (``upload-key:<key>``, see
    :data:`~citeline.store.catalog.UPLOAD_KEY_SCHEME`): a key its client chose and keeps for a file,
    such as its path in a folder kept in sync. Taken as given (case, spaces, slashes) but for its
    Unicode form (:func:`~citeline.store.catalog.source_key`); refused when empty or blank, over
    :data:`SOURCE_MAX_CHARS` characters, or holding a control character or a line break."""
    refuse_nul(key, "source")
    key = catalog.source_key(key)
    if not key.strip():
        raise InvalidRequestError("source (the key an upload is sent under) must not be empty or blank")
    if len(key) > SOURCE_MAX_CHARS:
        raise InvalidRequestError(
            f"source (the key an upload is sent under) is {len(key)} characters; at most {SOURCE_MAX_CHARS}"
        )
    # Spaces of every kind are kept (a file name may hold a no-break space); control characters and
    # line breaks would make a key no listing or shell line shows as it is.
    unprintable = next((c for c in key if unicodedata.category(c) in ("Cc", "Zl", "Zp")), None)
    if unprintable is not None:
        raise InvalidRequestError(
            f"source (the key an upload is sent under) must be printable: no line break, tab or other "
            f"control character, got {unprintable!r} in {key!r}"
        )
    return catalog.UPLOAD_KEY_SCHEME + key


def submit(
    engine: sa.Engine,
    settings: Settings,
    *,
    model: str,
    name: str,
    source_uri: str | None,
    content_hash: str | None,
    file_path: Path | None,
    options: IngestOptions,
    document_id: uuid.UUID | None = None,
    index: bool = True,
    force: bool = False,
    fetched_at: datetime | None = None,
) -> Submission:
    """Register a new version of a document for a runner to build (see the module's docstring).

    ``document_id`` replaces that document (a new version of it); without it a new document is
    created, for ``source_uri`` when given (a URL, a file or an upload's key, :func:`keyed_source`;
    a new version of the document holding it if one does), else for the upload itself. A replacement
    from another source than the document's (an upload replacing a file or web page, another URL)
    moves the document to that source, an upload's being none to read again: refresh never reads the
    old origin over it. Re-reading the document's own source (``source_uri`` its own) keeps it; a move
    is refused (:class:`~citeline.errors.ConflictError`) while a version of it is still to be built,
    or when the new source is another document's: for an upload's key, the refusal names the
    ``source`` and the ``document_id`` that disagree. A document sent with its id under a key no
    document holds takes that key, even when its bytes are unchanged; one sent with its id alone, as
    an upload, keeps its key. ``content_hash`` None (a web page not fetched yet)
    always registers a version: its job compares the page once fetched.
    ``fetched_at`` is when the source was read at its origin.
    """
    size = options.chunk_size if options.chunk_size is not None else settings.chunk_size
    overlap = options.chunk_overlap if options.chunk_overlap is not None else settings.chunk_overlap
    check_chunking(size, overlap)
    new_id: uuid.UUID | None = None
    moved_to: str | None = None
    with engine.begin() as conn:
        if document_id is not None:
            current = catalog.get_document(conn, document_id)
            origin = source_uri or f"upload:{document_id}"
            uploaded_over_upload = source_uri is None and catalog.is_upload(current.source_uri)
            key = catalog.upload_key(origin)
            if key is not None and origin != current.source_uri:
                holder = catalog.source_document(conn, origin)
                if holder is not None:
                    raise ConflictError(
                        f"source {key!r} is document {holder.id}, not document_id {document_id}: send "
                        "the upload with one of them, or delete the document it should not go to"
                    )
            if origin != current.source_uri and not uploaded_over_upload:
                # The replacement comes from elsewhere: the document must leave its old origin, or
                # refresh would read that again over it.
                catalog.check_movable(conn, current, origin)
                moved_to = origin
            # New versions join the document's source; a move takes them all along once one is made.
            source_uri = current.source_uri
        elif source_uri is None:
            new_id = uuid.uuid4()
            source_uri = f"upload:{new_id}"
        status = Status.QUEUED if index else Status.PENDING
        request = VersionRequest(
            source_uri,
            name,
            VersionSpec(content_hash, model, size, overlap, settings.vector_backend),
            options.labels(),
            str(file_path) if file_path else None,
            status=status,
            document_id=new_id,
            force=force,
            fetched_at=fetched_at,
            # Said at once (the answer to an upload, the list), not only once the build has read it.
            content_type=content_type_of(name, file_path) if file_path is not None else None,
        )
        [(doc, start)] = catalog.begin_versions(conn, [request])
        # A key taken with unchanged bytes is taken all the same: a client adopting keys sends its
        # files as they are.
        if moved_to is not None and (start is VersionStart.CREATED or catalog.upload_key(moved_to)):
            catalog.move_document(conn, doc.id, moved_to)
            doc = catalog.get_version(conn, doc.version_id)
        same = catalog.same_content(conn, content_hash, doc.id)
    if start is VersionStart.CREATED:
        return Submission(doc, status, same)
    return Submission(
        doc, Outcome.RELABELLED if start is VersionStart.RELABELLED else Outcome.UNCHANGED, same
    )


def submit_url(url: str) -> str:
    """Check a web page's address before it is registered; the address guard applies when fetched."""
    refuse_nul(url, "url")
    check_url(url)
    return url


_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*$", re.IGNORECASE)
_AGE_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_age(text: str) -> timedelta:
    """``30m``, ``12h``, ``1d``, ``2w`` (seconds to weeks) as a :class:`timedelta`."""
    match = _AGE.match(text)
    if match is None:
        raise InvalidRequestError(
            f"an age is a number and a unit: s, m, h, d or w (e.g. 12h, 1d, 2w), got {text!r}"
        )
    try:
        return timedelta(**{_AGE_UNITS[match.group(2).lower()]: float(match.group(1))})
    except OverflowError:
        raise InvalidRequestError(f"the age {text!r} is too long (at most 999999999 days)") from None


def origin_path(doc: DocumentInfo) -> Path | None:
    """Where a file document was read from (its ``file:`` source), or None for web pages and uploads."""
    parts = urlsplit(doc.source_uri)
    if parts.scheme != "file":
        return None
    return Path(url2pathname(parts.path))


@dataclass(frozen=True)
class Refreshed:
    """What refreshing a document did: a new version (``UPDATED``), none (``UNCHANGED``), ``FAILED``
    (the current version kept, ``error`` says why), or still ``QUEUED`` (a worker elsewhere builds it)."""

    document: DocumentInfo
    outcome: Outcome | Status
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "document_id": str(self.document.id),
            "name": self.document.name,
            "source_uri": self.document.source_uri,
            "outcome": str(self.outcome),
            "version": self.document.version,
            "last_fetched_at": self.document.last_fetched_at.isoformat()
            if self.document.last_fetched_at
            else None,
            "error": self.error,
        }


def reingest_request(doc: DocumentInfo) -> tuple[Path | None, str]:
    """What a new version of ``doc`` is built from: its stored original (or its URL) and hash."""
    if doc.file_path:
        path = Path(doc.file_path)
        if not path.exists():
            raise ConflictError(f"document {doc.id}: its stored original {path} is missing; upload it again")
        return path, doc.content_hash or ""
    if doc.reingestable:  # a web page, fetched again
        return None, doc.content_hash or ""
    # The document exists: what it lacks is something to build from (a failed or cancelled upload
    # keeps no original), a conflict with its state, not a missing resource.
    raise ConflictError(f"document {doc.id} has no stored original to re-ingest; upload it again")
