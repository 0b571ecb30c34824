"""Widening Q5_0 matrices to Q8_0: every weight keeps its value, everything else is copied as it was."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from citeline.answer.providers.gguf import MAGIC, Q5_0, Q8_0, GGUFFormatError, read_layout, widen_q5_0

F32 = 0
ALIGN = 32


def q5_0_values(raw: bytes) -> npt.NDArray[np.float32]:
    """Q5_0 weights as ggml's reference dequantizer computes them, written out plainly."""
    out = []
    for b in range(len(raw) // 22):
        block = raw[b * 22 : (b + 1) * 22]
        (d,) = np.frombuffer(block[0:2], dtype="<f2")
        (qh,) = struct.unpack("<I", block[2:6])
        qs = block[6:22]
        values = [0.0] * 32
        for j in range(16):
            values[j] = float(d) * (((qs[j] & 0x0F) | (((qh >> j) & 1) << 4)) - 16)
            values[j + 16] = float(d) * (((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16)
        out.extend(values)
    return np.array(out, dtype=np.float32)


def q8_0_values(raw: bytes) -> npt.NDArray[np.float32]:
    blocks = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 34)
    d = blocks[:, 0:2].copy().view("<f2").astype(np.float32)
    q = blocks[:, 2:].copy().view(np.int8).astype(np.float32)
    return (d * q).reshape(-1)


def gguf_string(text: str) -> bytes:
    return struct.pack("<Q", len(text.encode())) + text.encode()


def write_gguf(path: Path, tensors: list[tuple[str, int, bytes, tuple[int, ...]]]) -> None:
    """A small GGUF v3 file: three metadata entries (a string, an array of strings, a uint32) and
    ``tensors`` (name, type, data, dims), each at an aligned offset."""
    metadata = [
        gguf_string("general.architecture") + struct.pack("<I", 8) + gguf_string("qwen2"),
        gguf_string("tokenizer.ggml.tokens")
        + struct.pack("<IIQ", 9, 8, 3)
        + b"".join(gguf_string(t) for t in ("a", "bc", "def")),
        gguf_string("general.alignment") + struct.pack("<II", 4, ALIGN),
    ]
    infos, data, offset = b"", b"", 0
    for name, kind, raw, dims in tensors:
        infos += gguf_string(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        infos += struct.pack("<IQ", kind, offset)
        padded = raw + b"\0" * (-len(raw) % ALIGN)
        data += padded
        offset += len(padded)
    head = MAGIC + struct.pack("<IQQ", 3, len(tensors), len(metadata)) + b"".join(metadata) + infos
    path.write_bytes(head + b"\0" * (-len(head) % ALIGN) + data)


def tensor_bytes(path: Path, name: str) -> tuple[int, bytes]:
    layout = read_layout(path)
    [info] = [t for t in layout.tensors if t.name == name]
    block = {Q5_0: 22, Q8_0: 34}.get(info.type)
    size = info.elements // 32 * block if block else info.elements * 4
    with path.open("rb") as fh:
        fh.seek(layout.data_start + info.offset)
        return info.type, fh.read(size)


def random_q5_0(blocks: int, rng: np.random.Generator) -> bytes:
    raw = rng.integers(0, 256, size=(blocks, 22), dtype=np.uint8)
    # Scales of ordinary size (random bytes could make an fp16 NaN or infinity).
    scales = rng.uniform(-0.05, 0.05, blocks).astype("<f2")
    raw[:, 0:2] = np.frombuffer(scales.tobytes(), np.uint8).reshape(-1, 2)
    return raw.tobytes()


def test_widened_blocks_hold_the_same_weights_and_everything_else_is_unchanged(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    matrix = random_q5_0(96, rng)  # a 3 x 1024 matrix: 96 blocks
    embedding = random_q5_0(8, rng)
    norm = rng.standard_normal(64).astype("<f4").tobytes()
    source, target = tmp_path / "in.gguf", tmp_path / "out.gguf"
    write_gguf(
        source,
        [
            ("token_embd.weight", Q5_0, embedding, (128, 2)),
            ("blk.0.attn_norm.weight", F32, norm, (64,)),
            ("blk.0.ffn_up.weight", Q5_0, matrix, (1024, 3)),
        ],
    )

    assert widen_q5_0(source, target) == 1

    kind, widened = tensor_bytes(target, "blk.0.ffn_up.weight")
    assert kind == Q8_0
    np.testing.assert_array_equal(q8_0_values(widened), q5_0_values(matrix))
    # Only blk.* matrices are widened: the embedding is only looked rows up in.
    assert tensor_bytes(target, "token_embd.weight") == (Q5_0, embedding)
    assert tensor_bytes(target, "blk.0.attn_norm.weight") == (F32, norm)
    before, after = read_layout(source), read_layout(target)
    assert after.alignment == ALIGN
    assert [(t.name, t.dims) for t in after.tensors] == [(t.name, t.dims) for t in before.tensors]
    assert all(t.offset % ALIGN == 0 for t in after.tensors)
    assert (
        source.read_bytes()[before.metadata[0] : before.metadata[1]]
        == (target.read_bytes()[after.metadata[0] : after.metadata[1]])
    )


def test_extreme_values_survive_the_widening(tmp_path: Path) -> None:
    # Every five-bit value in both halves of a block, with the largest and smallest fp16 scales.
    blocks = []
    for scale in (65504.0, -6.1e-05, 1.0):
        qs = bytes((j & 0x0F) | ((15 - j) << 4) for j in range(16))
        blocks.append(np.array([scale], dtype="<f2").tobytes() + struct.pack("<I", 0xFFFF0000) + qs)
    matrix = b"".join(blocks)
    source, target = tmp_path / "in.gguf", tmp_path / "out.gguf"
    write_gguf(source, [("blk.0.attn_q.weight", Q5_0, matrix, (32, 3))])

    widen_q5_0(source, target)

    _, widened = tensor_bytes(target, "blk.0.attn_q.weight")
    np.testing.assert_array_equal(q8_0_values(widened), q5_0_values(matrix))


def test_a_file_that_is_not_gguf_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "model.bin"
    path.write_bytes(b"PK\x03\x04" + b"\0" * 64)

    with pytest.raises(GGUFFormatError, match=r"model\.bin is not a GGUF file"):
        widen_q5_0(path, tmp_path / "out.gguf")
