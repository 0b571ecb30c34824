"""Running the packaged models sends nothing anywhere and leaves nothing behind in the user's home."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import SPEC

TELEMETRY_DIR = Path(".cache") / "Microsoft" / "DeveloperTools" / ".onnxruntime"


def _run(home: Path, code: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "ORT_DISABLE_TELEMETRY"}
    env["HOME"] = str(home)
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=300)


def test_embedding_through_citeline_writes_no_onnxruntime_telemetry(tmp_path: Path) -> None:
    bare, ours = tmp_path / "bare", tmp_path / "citeline"
    bare.mkdir()
    ours.mkdir()
    # The control: onnxruntime on its own, in a process that never imports citeline.
    _run(bare, "import onnxruntime")
    if not (bare / TELEMETRY_DIR).exists():
        pytest.skip("this onnxruntime build keeps no telemetry: nothing to turn off")

    _run(ours, f"from citeline.embed import get_embedder; get_embedder({SPEC!r}).embed(['a query'])")

    assert not (ours / TELEMETRY_DIR).exists(), "onnxruntime wrote its telemetry queue under citeline"
