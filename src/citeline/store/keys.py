"""API keys in the catalog: create (the key is returned once), list, revoke, and resolve to an Access.

A key is ``cl_`` followed by 40 random URL-safe characters. Only its SHA-256 is stored, so a stolen
database holds no usable key; its first characters (``prefix``) are kept to tell keys apart in lists.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import select
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import sqlalchemy as sa

from citeline.access import Access, Role
from citeline.checks import check_names, refuse_nul
from citeline.errors import AuthenticationError, InvalidRequestError, NotFoundError
from citeline.retrieve.filters import check_scopes
from citeline.store.models import ApiKey

log = logging.getLogger(__name__)

_keys = cast(sa.Table, ApiKey.__table__)

KEY_PREFIX = "cl_"
#: How often ``last_used_at`` is written for a busy key: at most once a minute, not on every request.
_TOUCH_EVERY = timedelta(minutes=1)


@dataclass(frozen=True)
class KeyInfo:
    """A stored key, without the key itself."""

    id: uuid.UUID
    name: str
    role: Role
    scopes: tuple[str, ...] | None
    prefix: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None

    @property
    def access(self) -> Access:
        """The grant this key gives; its id owns the key's conversations."""
        user = f"key:{self.id}"
        if self.role is Role.ADMIN:
            return Access.admin(user)
        return Access.reader(self.scopes, user)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": str(self.id),
            "name": self.name,
            "role": self.role.value,
            "scopes": None if self.scopes is None else list(self.scopes),
            # Said outright, as /keys/me says it: a null list is easily read as "no scope".
            "all_scopes": self.scopes is None,
            "prefix": self.prefix,
            "created_at": self.created_at.isoformat(),
            "last_used_at": self.last_used_at.isoformat() if self.last_used_at else None,
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
        }


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def reach(role: Role, scopes: Iterable[str] | None, all_scopes: bool = False) -> list[str] | None:
    """The scopes a key asked for with ``scopes`` and ``all_scopes`` is bound to (None: every scope),
    or :class:`InvalidRequestError` when its reach is unclear. Every shell asks this before making a key
    (``citeline keys create`` before it opens the store).

    An admin key covers every scope and takes neither. A reader key needs at least one scope, or all of
    them: one with none would see universal documents only, far more likely a caller's mistake (a
    forgotten option, an empty list) than its intent. :func:`create_key` itself can still make such a
    key, for callers that mean it.
    """
    if isinstance(scopes, str | bytes):
        check_names(scopes, "scopes", "scopes")  # refused: as a list it would be the scopes g, u, i, ...
    given = None if scopes is None else list(scopes)
    check_names(given, "scopes", "scopes")
    if role is Role.ADMIN and (given is not None or all_scopes):
        raise InvalidRequestError(
            "scopes: an admin key covers every scope: give it no scopes and no all_scopes (--scope, "
            "--all-scopes)"
        )
    if given is not None and all_scopes:
        raise InvalidRequestError("scopes: give scopes or all_scopes (--scope or --all-scopes), not both")
    if role is Role.READER and not given and not all_scopes:
        raise InvalidRequestError(
            "scopes: a reader key needs at least one scope, or all_scopes: true "
            "(in the CLI, --scope S, repeatable, or --all-scopes)"
        )
    return None if role is Role.ADMIN or all_scopes else given


def create_key(
    conn: sa.Connection, *, role: Role, scopes: Iterable[str] | None = None, name: str = ""
) -> tuple[KeyInfo, str]:
    """A new key: its stored record and the key itself, which is never available again.

    An admin key covers every scope; a reader key is bound to ``scopes`` (None: every scope; an empty
    collection: universal documents only).
    """
    if role is Role.ADMIN and scopes is not None:
        raise InvalidRequestError("an admin key covers every scope; do not give it scopes")
    scopes = None if scopes is None else list(scopes)
    refuse_nul(name, "name")
    refuse_nul(scopes, "scopes")
    check_scopes(scopes)  # a blank one dropped silently would leave a key narrower than asked
    bound = None if scopes is None else sorted(set(scopes))
    key = KEY_PREFIX + secrets.token_urlsafe(30)
    row = conn.execute(
        sa.insert(_keys)
        .values(
            id=uuid.uuid4(),
            name=name or f"{role.value} key",
            role=role.value,
            scopes=bound,
            key_hash=hash_key(key),
            prefix=key[:10],
        )
        .returning(*_keys.c)
    ).one()
    return _info(row), key


def list_keys(conn: sa.Connection, *, include_revoked: bool = False) -> list[KeyInfo]:
    query = sa.select(_keys).order_by(_keys.c.created_at)
    if not include_revoked:
        query = query.where(_keys.c.revoked_at.is_(None))
    return [_info(r) for r in conn.execute(query)]


def find_key(conn: sa.Connection, ref: uuid.UUID | str) -> uuid.UUID:
    """The id of the key ``ref`` names: its id, or a unique start of it (as ``keys list`` may show ids
    cut short, and as documents are named). Revoked keys count: revoking one again is harmless."""
    if isinstance(ref, uuid.UUID):
        return ref
    refuse_nul(ref, "key id")
    try:
        return uuid.UUID(ref)
    except ValueError:
        pass
    prefix = ref.strip().lower()
    if not prefix or prefix.strip("0123456789abcdef-"):
        raise InvalidRequestError(
            f"key id {ref!r} is neither a key id nor the start of one (see `citeline keys list`)"
        )
    found = list(
        conn.execute(
            sa.select(_keys.c.id).where(sa.cast(_keys.c.id, sa.Text).startswith(prefix)).limit(2)
        ).scalars()
    )
    if not found:
        raise NotFoundError(f"no API key id starts with {ref!r} (see `citeline keys list --revoked`)")
    if len(found) > 1:
        raise InvalidRequestError(f"key id prefix {ref!r} matches several keys; give more of it")
    return uuid.UUID(str(found[0]))


def revoke_key(conn: sa.Connection, key_id: uuid.UUID | str) -> KeyInfo:
    """Revoke a key (by id or unique id prefix, :func:`find_key`) at once; requests carrying it are
    refused from then on."""
    ident = find_key(conn, key_id)
    row = conn.execute(
        sa.update(_keys)
        .where(_keys.c.id == ident)
        .values(revoked_at=sa.func.coalesce(_keys.c.revoked_at, sa.func.now()))
        .returning(*_keys.c)
    ).first()
    if row is None:
        raise NotFoundError(f"no API key with id {ident}")
    # Delivered when the revocation commits, to every process listening (KeyCache.listen).
    conn.execute(sa.select(sa.func.pg_notify(REVOKED_CHANNEL, str(ident))))
    return _info(row)


def authenticate(conn: sa.Connection, key: str) -> KeyInfo:
    """The live key ``key`` is; :class:`AuthenticationError` for an unknown or revoked one."""
    row = conn.execute(sa.select(_keys).where(_keys.c.key_hash == hash_key(key))).first()
    if row is None:
        raise AuthenticationError("unknown API key")
    info = _info(row)
    if info.revoked_at is not None:
        raise AuthenticationError(f"API key {info.prefix}... was revoked")
    now = datetime.now(UTC)
    if info.last_used_at is None or now - info.last_used_at > _TOUCH_EVERY:
        conn.execute(sa.update(_keys).where(_keys.c.id == info.id).values(last_used_at=now))
        info = replace(info, last_used_at=now)
    return info


#: The PostgreSQL channel a revoked key's id is announced on (:func:`revoke_key`).
REVOKED_CHANNEL = "citeline_key_revoked"


class KeyCache:
    """Keys this process has checked recently, so a busy key costs no database round trip per request.

    An entry is trusted for ``seconds``. A key revoked through this process is dropped at once
    (:meth:`forget`); one revoked by another process (a second server process, ``citeline keys
    revoke``) is dropped when its notification arrives, once :meth:`listen` runs, and within ``seconds``
    if a notification is missed (while the listening connection is down). Only the key's hash is held,
    as in the catalog.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[float, KeyInfo]] = {}
        self._stop = threading.Event()
        self._listener: threading.Thread | None = None
        #: The listening connection (psycopg's low-level one) while it listens. Its notifications are
        #: read only under ``_reading``, by whichever thread finds them waiting first.
        self._pgconn: Any = None
        self._socket: int | None = None
        self._reading = threading.Lock()

    def listen(self, engine: sa.Engine) -> None:
        """Drop each key the moment any process revokes it: a thread listens on :data:`REVOKED_CHANNEL`
        over a connection of its own. Started once; nothing to do when nothing is cached."""
        with self._lock:
            if self.seconds <= 0 or self._listener is not None or self._stop.is_set():
                return
            self._listener = threading.Thread(
                target=self._listen, args=(engine,), name="citeline-key-revocations", daemon=True
            )
            self._listener.start()

    def _listen(self, engine: sa.Engine) -> None:
        while not self._stop.is_set():
            try:
                raw = engine.raw_connection()
                # Taken before the detach, after which the pool's wrapper no longer gives it.
                connection = raw.driver_connection
                assert connection is not None
                # Held for the process's life: out of the pool, which opens another in its place.
                raw.detach()
                try:
                    connection.rollback()
                    connection.autocommit = True
                    connection.execute(f"LISTEN {REVOKED_CHANNEL}")
                    # Whatever was revoked while no one listened is unknown: nothing cached is trusted.
                    self.clear()
                    with self._reading:
                        self._pgconn = connection.pgconn
                        self._socket = connection.fileno()
                    while not self._stop.is_set():
                        # Waits without reading: a request that finds a notification waiting reads it
                        # itself (:meth:`get`), so none is ever read and not yet acted on while a
                        # request trusts the cache (on a busy process this thread may not run for a
                        # long while after it wakes).
                        _readable(self._socket, 1.0)
                        self._read_notifications()
                finally:
                    with self._reading:
                        self._pgconn = None
                        self._socket = None
                    connection.close()
            except Exception as exc:  # the database went away: the TTL holds until it is back
                if self._stop.is_set():
                    return
                log.warning("not listening for revoked API keys (%r); retrying in 1 s", exc)
                self.clear()
                self._stop.wait(1.0)

    def _read_notifications(self) -> None:
        """Act on every revocation that has reached the listening connection (any thread). Raises when
        the connection is broken (in the listening thread, which then connects again)."""
        with self._reading:
            pgconn = self._pgconn
            if pgconn is None:
                return
            pgconn.consume_input()  # what the socket holds, without waiting
            while (note := pgconn.notifies()) is not None:
                self.forget(uuid.UUID(note.extra.decode()))

    def close(self) -> None:
        """Stop listening (within a second)."""
        self._stop.set()
        if self._listener is not None:
            self._listener.join(timeout=5.0)

    def clear(self) -> None:
        with self._lock:
            self._entries = {}

    def get(self, key: str) -> KeyInfo | None:
        """The key's record if it was checked less than ``seconds`` ago."""
        if self.seconds <= 0:
            return None
        listening = self._socket
        if listening is not None and (self._reading.locked() or _readable(listening, 0.0)):
            # A revocation may be waiting, or being read by another thread: read it here (or wait for
            # that thread to act on it) rather than trust the entry meanwhile.
            try:
                self._read_notifications()
            except Exception:  # the connection broke: the listening thread connects again
                return None
        entry = self._entries.get(hash_key(key))
        if entry is None or entry[0] <= time.monotonic():
            return None
        return entry[1]

    def put(self, key: str, info: KeyInfo) -> None:
        if self.seconds <= 0:
            return
        now = time.monotonic()
        with self._lock:
            # Expired entries go when a new one comes, so keys seen once do not pile up.
            self._entries = {h: e for h, e in self._entries.items() if e[0] > now}
            self._entries[hash_key(key)] = (now + self.seconds, info)

    def forget(self, key_id: uuid.UUID) -> None:
        """Drop every entry of the key ``key_id`` (it was just revoked)."""
        with self._lock:
            self._entries = {h: e for h, e in self._entries.items() if e[1].id != key_id}


def _readable(socket: int, timeout: float) -> bool:
    """Whether ``socket`` has data to read, waiting up to ``timeout`` seconds (poll, not select: a busy
    server's descriptors may be past select's 1,024)."""
    waiting = select.poll()
    waiting.register(socket, select.POLLIN)
    return bool(waiting.poll(timeout * 1000))


def has_keys(conn: sa.Connection) -> bool:
    """Whether any live key exists (a server with none refuses requests unless in open mode)."""
    live = sa.select(_keys.c.id).where(_keys.c.revoked_at.is_(None)).limit(1)
    return conn.execute(live).first() is not None


def _info(row: sa.Row[Any]) -> KeyInfo:
    return KeyInfo(
        id=row.id,
        name=row.name,
        role=Role(row.role),
        scopes=None if row.scopes is None else tuple(row.scopes),
        prefix=row.prefix,
        created_at=row.created_at,
        last_used_at=row.last_used_at,
        revoked_at=row.revoked_at,
    )
