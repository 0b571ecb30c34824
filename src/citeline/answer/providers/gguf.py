"""Widening a GGUF model's Q5_0 weights to Q8_0: the same weights, read faster by llama.cpp on x86.

The packaged default model (Qwen2.5-Coder 0.5B, "Q4_K_M") holds most of its matrices as Q5_0, because
its 896-wide rows do not divide into the 256-value blocks of the K-quants. llama.cpp on AVX2 has no
fast path for Q5_0 and does for Q8_0: read the same prompts, the widened file reads them in 0.82x the
time (median of 15 paired prompts of about 200 tokens on 2 cores, ``bench/llm_params.py``-style,
session 9), and writes at the same speed.

The widening is exact. A Q5_0 block is an fp16 scale ``d`` and 32 five-bit values ``q`` meaning
``d * (q - 16)``; a Q8_0 block is an fp16 scale and 32 signed bytes meaning ``d * q``. Writing each
block's own ``d`` and ``q - 16`` (in -16..15) gives every weight the very same value, so the model is
the one published, only stored wider (each Q5_0 matrix grows from 22 to 34 bytes per 32 weights: 94 MB
more for the 0.5B model). Only the ``blk.*`` matrices are widened; the token embedding, which llama.cpp
only looks rows up in, stays as it is.

The file layout (GGUF v2/v3): a header, the metadata (copied byte for byte), one record per tensor
(name, dimensions, type, offset into the data), padding to the alignment, then the tensor data, each
tensor starting at a multiple of the alignment.
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import numpy.typing as npt

MAGIC = b"GGUF"
Q5_0 = 6
Q8_0 = 8
_Q5_0_BLOCK = 22  # fp16 scale, 4 bytes of fifth bits, 16 bytes of low nibbles: 32 weights
_Q8_0_BLOCK = 34  # fp16 scale, 32 signed bytes
_DEFAULT_ALIGNMENT = 32
# Metadata value types: fixed sizes in bytes; 8 is a string, 9 an array.
_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY, _UINT32 = 8, 9, 4
_BLOCKS_PER_STEP = 1 << 16


class GGUFFormatError(ValueError):
    """The file is not a GGUF file this module can read."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dims: tuple[int, ...]
    type: int
    offset: int  # from the start of the data section

    @property
    def elements(self) -> int:
        return math.prod(self.dims)


@dataclass(frozen=True)
class Layout:
    """Where the parts of a GGUF file lie."""

    version: int
    metadata: tuple[int, int]  # byte range of the key/value section
    tensors: tuple[TensorInfo, ...]
    alignment: int
    data_start: int
    size: int


def read_layout(path: Path) -> Layout:
    """The layout of the GGUF file at ``path`` (:class:`GGUFFormatError` if it is not one)."""
    with path.open("rb") as fh:
        magic = fh.read(4)
        if magic != MAGIC:
            raise GGUFFormatError(f"{path} is not a GGUF file (it starts with {magic!r})")
        version, tensor_count, kv_count = struct.unpack("<IQQ", fh.read(20))
        if version < 2:
            raise GGUFFormatError(f"{path} is GGUF version {version}; versions 2 and later are read")
        kv_start = fh.tell()
        alignment = _DEFAULT_ALIGNMENT
        for _ in range(kv_count):
            key = _string(fh)
            (kind,) = struct.unpack("<I", fh.read(4))
            if key == "general.alignment" and kind == _UINT32:
                (alignment,) = struct.unpack("<I", fh.read(4))
            else:
                _skip(fh, kind)
        kv_end = fh.tell()
        tensors = []
        for _ in range(tensor_count):
            name = _string(fh)
            (n_dims,) = struct.unpack("<I", fh.read(4))
            dims = struct.unpack(f"<{n_dims}Q", fh.read(8 * n_dims))
            kind, offset = struct.unpack("<IQ", fh.read(12))
            tensors.append(TensorInfo(name, tuple(dims), kind, offset))
        data_start = _aligned(fh.tell(), alignment)
    return Layout(version, (kv_start, kv_end), tuple(tensors), alignment, data_start, path.stat().st_size)


def widen_q5_0(source: Path, target: Path) -> int:
    """Write ``source`` to ``target`` with its ``blk.*`` Q5_0 tensors as Q8_0 (see the module docstring).

    Returns how many tensors were widened. ``target`` is written whole and synced; the caller renames it.
    """
    layout = read_layout(source)
    order = sorted(layout.tensors, key=lambda t: t.offset)
    ends = [t.offset for t in order[1:]] + [layout.size - layout.data_start]
    spans = {t.name: (t.offset, end) for t, end in zip(order, ends, strict=True)}
    widened = {t.name for t in layout.tensors if t.type == Q5_0 and t.name.startswith("blk.")}
    offsets: dict[str, int] = {}
    position = 0
    for t in order:
        offsets[t.name] = position
        start, end = spans[t.name]
        size = t.elements // 32 * _Q8_0_BLOCK if t.name in widened else end - start
        position = _aligned(position + size, layout.alignment)
    with source.open("rb") as src, target.open("wb") as out:
        out.write(MAGIC + struct.pack("<IQ", layout.version, len(layout.tensors)))
        src.seek(16)
        out.write(src.read(8))  # the metadata count, unchanged
        src.seek(layout.metadata[0])
        out.write(src.read(layout.metadata[1] - layout.metadata[0]))
        for t in layout.tensors:
            name = t.name.encode()
            out.write(struct.pack("<Q", len(name)) + name + struct.pack("<I", len(t.dims)))
            out.write(struct.pack(f"<{len(t.dims)}Q", *t.dims))
            out.write(struct.pack("<IQ", Q8_0 if t.name in widened else t.type, offsets[t.name]))
        out.write(b"\0" * (_aligned(out.tell(), layout.alignment) - out.tell()))
        base = out.tell()
        for t in order:
            out.write(b"\0" * (base + offsets[t.name] - out.tell()))
            start, end = spans[t.name]
            src.seek(layout.data_start + start)
            if t.name in widened:
                _write_widened(src, out, t.elements // 32)
            else:
                _copy(src, out, end - start)
        out.flush()
        os.fsync(out.fileno())
    return len(widened)


def q5_0_to_q8_0(blocks: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    """Q5_0 blocks (rows of 22 bytes) as Q8_0 blocks (rows of 34 bytes) holding the same values."""
    scale = blocks[:, 0:2]
    high = np.ascontiguousarray(blocks[:, 2:6]).view("<u4")  # (n, 1): bit j is weight j's fifth bit
    low = blocks[:, 6:22]
    bits = ((high >> np.arange(32, dtype=np.uint32)) & 1).astype(np.int16) << 4
    # Byte j holds weight j in its low nibble and weight j + 16 in its high one.
    values = np.concatenate([(low & 0x0F) | bits[:, :16], (low >> 4) | bits[:, 16:]], axis=1) - 16
    out = np.empty((blocks.shape[0], _Q8_0_BLOCK), dtype=np.uint8)
    out[:, 0:2] = scale
    out[:, 2:] = values.astype(np.int8).view(np.uint8)
    return out


def _write_widened(src: BinaryIO, out: BinaryIO, blocks: int) -> None:
    while blocks:
        step = min(blocks, _BLOCKS_PER_STEP)
        raw = src.read(step * _Q5_0_BLOCK)
        if len(raw) != step * _Q5_0_BLOCK:
            raise GGUFFormatError("the file ends inside a Q5_0 tensor")
        out.write(q5_0_to_q8_0(np.frombuffer(raw, dtype=np.uint8).reshape(step, _Q5_0_BLOCK)).tobytes())
        blocks -= step


def _copy(src: BinaryIO, out: BinaryIO, size: int) -> None:
    while size:
        chunk = src.read(min(size, 1 << 22))
        if not chunk:
            raise GGUFFormatError("the file ends inside a tensor")
        out.write(chunk)
        size -= len(chunk)


def _aligned(offset: int, alignment: int) -> int:
    return offset + (-offset % alignment)


def _string(fh: BinaryIO) -> str:
    (length,) = struct.unpack("<Q", fh.read(8))
    return fh.read(length).decode("utf-8", errors="replace")


def _skip(fh: BinaryIO, kind: int) -> None:
    if kind in _SIZES:
        fh.seek(_SIZES[kind], os.SEEK_CUR)
    elif kind == _STRING:
        (length,) = struct.unpack("<Q", fh.read(8))
        fh.seek(length, os.SEEK_CUR)
    elif kind == _ARRAY:
        item, count = struct.unpack("<IQ", fh.read(12))
        if item in _SIZES:
            fh.seek(_SIZES[item] * count, os.SEEK_CUR)
        else:
            for _ in range(count):
                _skip(fh, item)
    else:
        raise GGUFFormatError(f"unknown metadata value type {kind}")
