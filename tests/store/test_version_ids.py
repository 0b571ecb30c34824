"""Version ids as PostgreSQL packs them, and matching other ids to them in numpy."""

from __future__ import annotations

import uuid

import numpy as np

from citeline.store.index import VersionIds, VersionSlots


def _twin(of: uuid.UUID) -> uuid.UUID:
    """Another id whose halves XOR to the same fingerprint as ``of``'s."""
    hi, lo = of.int >> 64, of.int & (2**64 - 1)
    return uuid.UUID(int=((hi ^ 0xFF) << 64) | (lo ^ 0xFF))


def test_packed_ids_read_back_as_the_uuids_they_were_made_of() -> None:
    ids = [uuid.uuid4() for _ in range(5)]
    packed = VersionIds.of(ids)
    assert len(packed) == 5
    assert list(packed) == ids
    assert packed[3] == ids[3]
    assert packed[1:3] == ids[1:3]
    assert packed == VersionIds(b"".join(i.bytes for i in ids))


def test_version_slots_find_every_known_id_even_when_fingerprints_collide() -> None:
    ids = [uuid.uuid4() for _ in range(200)]
    twin = _twin(ids[0])
    known = [*ids, twin]
    slots = np.arange(len(known), dtype=np.int64) + 1
    unknown = [uuid.uuid4() for _ in range(20)]
    wanted = [twin, *ids[::3], *unknown]
    expected = sorted([len(known), *range(1, len(ids) + 1, 3)])

    colliding = VersionSlots.of(VersionIds.of(known), slots)
    assert colliding.collide
    assert sorted(colliding.slots_of(VersionIds.of(wanted)).tolist()) == expected
    plain = VersionSlots.of(VersionIds.of(ids), slots[:-1])
    assert not plain.collide
    assert sorted(plain.slots_of(VersionIds.of(wanted)).tolist()) == expected[:-1]
    assert plain.slots_of(VersionIds(b"")).size == 0


def test_known_says_which_ids_are_among_them_in_the_order_asked() -> None:
    scope = [uuid.uuid4() for _ in range(300)]
    others = [uuid.uuid4() for _ in range(50)]
    asked = [others[0], scope[7], others[1], scope[0], scope[299], _twin(scope[5]), scope[7]]
    expected = [False, True, False, True, True, False, True]

    lookup = VersionIds.of(scope).lookup()
    assert lookup.known(VersionIds.of(asked)).tolist() == expected
    # With a colliding pair among the known ids, whole ids decide.
    colliding = VersionIds.of([*scope, _twin(scope[5])]).lookup()
    assert colliding.collide
    assert colliding.known(VersionIds.of(asked)).tolist() == [*expected[:5], True, True]
    assert lookup.known(VersionIds(b"")).size == 0
    assert VersionIds(b"").lookup().known(VersionIds.of(asked)).tolist() == [False] * len(asked)


def test_the_lookup_is_built_once_per_set_of_ids() -> None:
    ids = VersionIds.of([uuid.uuid4() for _ in range(10)])
    assert ids.lookup() is ids.lookup()
    assert sorted(ids.lookup().slots.tolist()) == list(range(10))
