"""Giving the C heap's free memory back to the system after a model loads.

Loading an ONNX model copies it several times over: the file's bytes, onnx's parsed graph, the rewritten
graph serialised again, onnxruntime's own parse and its optimised graph. Once the session is built
those copies are freed, but glibc keeps freed pages in its heap for the process's later allocations,
and nothing a search or an answer does afterwards asks for that much at once, so the process keeps
them for its whole life. Measured on a serving process after ``warm_up`` (SciFact store, embedder with
its query session, keyword index, stance classifier): 824 MB PSS, of which 151 MB was freed heap that
:func:`trim` returned, and 105 MB was model bytes onnxruntime's Python wrapper keeps (see
embed/onnx.py and answer/nli.py) (docs/performance.md, "Memory of a serving process").
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        function = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to call
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    return function


def trim() -> bool:
    """Return the heap's free pages to the system (glibc's ``malloc_trim``); False where the C library
    has none, which changes nothing but the memory the process keeps. A few milliseconds: call it after
    a model loads, not per request."""
    function = _malloc_trim()
    if function is None:
        return False
    function(0)
    return True
