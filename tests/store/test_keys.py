"""API keys: shown once, stored hashed, resolved to the grant they were created with, revocable."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from citeline.access import Role
from citeline.engine import Citeline
from citeline.errors import AuthenticationError, InvalidRequestError
from citeline.ingest import IngestOptions
from citeline.retrieve.filters import Filters
from citeline.retrieve.search import SearchRequest
from citeline.store import keys


def test_a_key_resolves_to_its_grant_and_is_stored_only_hashed(cl: Citeline) -> None:
    with cl.engine.begin() as conn:
        info, key = keys.create_key(conn, role=Role.READER, scopes=["ward-a"], name="ward A nurses")
    assert key.startswith("cl_") and len(key) > 40
    with cl.engine.begin() as conn:
        stored = conn.execute(sa.text("SELECT key_hash, prefix FROM api_keys")).one()
        found = keys.authenticate(conn, key)
    assert stored.key_hash == keys.hash_key(key) and key not in stored
    assert found.id == info.id and found.last_used_at is not None
    access = found.access
    assert access.role is Role.READER and access.scopes == frozenset({"ward-a"})
    assert access.user_id == f"key:{info.id}"


def test_unknown_and_revoked_keys_are_refused(cl: Citeline) -> None:
    with cl.engine.begin() as conn:
        info, key = keys.create_key(conn, role=Role.ADMIN)
        assert keys.has_keys(conn)
        with pytest.raises(AuthenticationError):
            keys.authenticate(conn, key + "x")
        keys.revoke_key(conn, info.id)
        with pytest.raises(AuthenticationError, match="revoked"):
            keys.authenticate(conn, key)
        assert not keys.has_keys(conn) and keys.list_keys(conn) == []
        assert [k.id for k in keys.list_keys(conn, include_revoked=True)] == [info.id]


def test_an_admin_key_cannot_be_bound_to_scopes_and_a_reader_may_be_universal_only(cl: Citeline) -> None:
    with cl.engine.begin() as conn:
        with pytest.raises(InvalidRequestError):
            keys.create_key(conn, role=Role.ADMIN, scopes=["a"])
        info, _ = keys.create_key(conn, role=Role.READER, scopes=[])
        # A blank scope is refused, not dropped: dropped, it would leave a key narrower than asked.
        with pytest.raises(InvalidRequestError, match="a scope must not be empty or blank"):
            keys.create_key(conn, role=Role.READER, scopes=["ward-a", " "])
    assert info.access.scopes == frozenset()


def test_a_scope_with_surrounding_whitespace_is_refused_alike_by_keys_documents_and_filters(
    cl: Citeline, tmp_path: Path
) -> None:
    """Keys stripped " clinic " to "clinic" while documents and filters kept it as given, so a key made
    for the scope a document was ingested with could not see it. Every one of them now refuses it."""
    note = tmp_path / "note.md"
    note.write_text("Clinic opening hours are nine to five.", encoding="utf-8")
    refused = "a scope must not start or end with whitespace; got ' clinic ' \\(did you mean 'clinic'\\?\\)"
    with cl.engine.begin() as conn, pytest.raises(InvalidRequestError, match=refused):
        keys.create_key(conn, role=Role.READER, scopes=[" clinic "])
    with pytest.raises(InvalidRequestError, match=refused):
        cl.ingest([note], IngestOptions(scopes=(" clinic ",)))
    with pytest.raises(InvalidRequestError, match=refused):
        cl.search(SearchRequest("opening hours", filters=Filters(scopes=(" clinic ",))))
    with pytest.raises(InvalidRequestError, match="a tag must not start or end with whitespace"):
        cl.ingest([note], IngestOptions(tags=("rota ",)))
    assert cl.documents() == []


def test_a_checked_key_is_trusted_for_the_cache_time_and_a_revoke_here_ends_it_at_once(cl: Citeline) -> None:
    info, key = cl.create_key(Role.READER, ["ward-a"])
    assert cl.cached_key(key) is None  # never checked: the database decides
    assert cl.authenticate(key).id == info.id
    assert cached(cl, key) == info.id
    cl.revoke_key(info.id)
    assert cl.cached_key(key) is None
    with pytest.raises(AuthenticationError, match="revoked"):
        cl.authenticate(key)


def test_a_revoke_whose_notification_is_missed_is_refused_here_once_its_cache_time_is_over(
    cl: Citeline,
) -> None:
    with cl.derive(api_key_cache_seconds=3) as quick:
        info, key = quick.create_key(Role.ADMIN)
        checked = time.monotonic()
        assert quick.authenticate(key).id == info.id
        with cl.engine.begin() as conn:  # revoked with no notification (as while nobody listened)
            conn.execute(sa.text("UPDATE api_keys SET revoked_at = now() WHERE id = :id"), {"id": info.id})
        assert quick.authenticate(key).id == info.id
        time.sleep(max(0.0, checked + 3.1 - time.monotonic()))
        assert quick.cached_key(key) is None
        with pytest.raises(AuthenticationError, match="revoked"):
            quick.authenticate(key)


def test_a_key_revoked_by_another_process_is_refused_here_as_soon_as_the_revoke_commits(
    cl: Citeline,
) -> None:
    """Each process listens for PostgreSQL's notification of a revoke and reads it as soon as a request
    finds it waiting. The listening connection was taken from the pool's wrapper after detaching it,
    which gives none: the listener failed every second, dropping every key this process held (so a
    revoke seemed to reach it within a second) and logging a warning each time."""
    with cl.derive(api_key_cache_seconds=60) as here, cl.derive(api_key_cache_seconds=60) as there:
        kept, kept_key = there.create_key(Role.READER, ["ward-a"])
        revoked, revoked_key = there.create_key(Role.READER, ["ward-a"])
        here.authenticate(kept_key)
        here.authenticate(revoked_key)
        time.sleep(2.5)  # longer than the listener's retry after a failure
        assert cached(here, kept_key) == kept.id  # held for the cache time while nothing is revoked
        there.revoke_key(revoked.id)
        deadline = time.monotonic() + 5
        while cached(here, revoked_key) is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert cached(here, revoked_key) is None
        assert cached(here, kept_key) == kept.id
        with pytest.raises(AuthenticationError, match="revoked"):
            here.authenticate(revoked_key)


def test_a_zero_cache_time_reads_the_key_on_every_request(cl: Citeline) -> None:
    with cl.derive(api_key_cache_seconds=0) as uncached:
        info, key = uncached.create_key(Role.ADMIN)
        uncached.authenticate(key)
        assert uncached.cached_key(key) is None
        with cl.engine.begin() as conn:
            keys.revoke_key(conn, info.id)
        with pytest.raises(AuthenticationError):
            uncached.authenticate(key)


def cached(cl: Citeline, key: str) -> object:
    info = cl.cached_key(key)
    return None if info is None else info.id


@pytest.mark.parametrize(
    ("role", "scopes", "all_scopes", "message"),
    [
        (Role.READER, None, False, "at least one"),
        (Role.READER, [], False, "at least one"),
        (Role.READER, ["ward-a"], True, "not both"),
        (Role.READER, [], True, "not both"),
        (Role.ADMIN, ["ward-a"], False, "covers every scope"),
        (Role.ADMIN, None, True, "covers every scope"),
    ],
)
def test_every_shell_is_refused_a_key_whose_reach_is_unclear(
    cl: Citeline, role: Role, scopes: list[str] | None, all_scopes: bool, message: str
) -> None:
    # The library decides, so the API, the CLI and a Python caller refuse the same keys alike.
    with pytest.raises(InvalidRequestError, match=message):
        cl.create_key(role, scopes, all_scopes=all_scopes)
    assert cl.api_keys() == []


def test_a_reader_of_every_scope_is_asked_for_by_name() -> None:
    assert keys.reach(Role.READER, None, all_scopes=True) is None
    assert keys.reach(Role.READER, ["ward-b", "ward-a"]) == ["ward-b", "ward-a"]
    assert keys.reach(Role.ADMIN, None) is None


def test_a_reader_key_given_one_scope_as_a_string_is_refused_not_bound_to_its_letters() -> None:
    with pytest.raises(InvalidRequestError, match=r"^scopes: give a list of scopes, not the string 'guide'"):
        keys.reach(Role.READER, "guide")
