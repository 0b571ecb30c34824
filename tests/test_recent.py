"""The bounded map behind search's per-process caches (query vectors, filters' scopes, keyword masks)."""

from __future__ import annotations

import threading

from citeline.recent import Recent


def test_it_keeps_at_most_its_size_dropping_the_least_recently_used() -> None:
    recent: Recent[str, int] = Recent(2)
    recent.put("a", 1)
    recent.put("b", 2)
    assert recent.get("a") == 1  # a is now more recent than b

    recent.put("c", 3)

    assert len(recent) == 2
    assert recent.get("b") is None
    assert (recent.get("a"), recent.get("c")) == (1, 3)


def test_putting_a_kept_key_again_replaces_its_value_and_makes_it_the_most_recent() -> None:
    recent: Recent[str, int] = Recent(2)
    recent.put("a", 1)
    recent.put("b", 2)
    recent.put("a", 10)

    recent.put("c", 3)

    assert recent.get("a") == 10
    assert recent.get("b") is None


def test_a_size_below_one_keeps_nothing() -> None:
    recent: Recent[str, int] = Recent(0)
    recent.put("a", 1)
    assert recent.get("a") is None
    assert len(recent) == 0


def test_clear_forgets_everything() -> None:
    recent: Recent[str, int] = Recent(4)
    recent.put("a", 1)
    recent.clear()
    assert recent.get("a") is None


def test_threads_sharing_it_never_see_it_beyond_its_size_or_a_value_under_another_key() -> None:
    recent: Recent[int, int] = Recent(8)
    errors: list[str] = []

    def work(offset: int) -> None:
        for i in range(2000):
            key = (offset + i) % 32
            recent.put(key, key * 7)
            value = recent.get((key + 3) % 32)
            if value is not None and value != ((key + 3) % 32) * 7:
                errors.append(f"{key}: {value}")
            if len(recent) > 8:
                errors.append(f"size {len(recent)}")

    threads = [threading.Thread(target=work, args=(n * 5,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert len(recent) == 8
