"""Giving freed heap back to the system after a model loads (citeline/heap.py)."""

from __future__ import annotations

import platform

import pytest

from citeline import heap


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_trim_returns_the_heaps_free_pages_on_glibc() -> None:
    assert heap.trim() is True


def test_trim_changes_nothing_where_the_c_library_has_no_malloc_trim(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap, "_malloc_trim", lambda: None)
    assert heap.trim() is False
