"""The ``sentence-transformers`` embedding provider: a model folder run by sentence-transformers on torch.

``sentence-transformers:<folder>`` loads a sentence-transformers model saved in a local folder (the one
``SentenceTransformer.save`` writes, or a copy of a model repository). Nothing is ever downloaded: the
folder must hold the whole model. It needs torch and sentence-transformers, which the base install
leaves out: ``pip install 'citeline[sentence-transformers]'``. The model's own pooling and
normalisation apply; the vectors are L2-normalised here in any case.

The model id is the spec as written, folder included: documents embedded with one folder are searched
with the same folder, and moving it means setting the new path as another model.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from citeline.errors import ConfigError, EmbeddingError
from citeline.settings import Settings

INSTALL = "pip install 'citeline[sentence-transformers]'"


class SentenceTransformersEmbedder:
    """An :class:`~citeline.embed.base.Embedder` running a local sentence-transformers model folder.

    Raises :class:`ConfigError` when the folder is missing or sentence-transformers is not installed,
    and :class:`EmbeddingError` when the model cannot be loaded.
    """

    def __init__(self, folder: str, settings: Settings) -> None:
        self.model_id = f"sentence-transformers:{folder}"
        path = Path(folder).expanduser()
        if not (path / "modules.json").is_file() and not (path / "config.json").is_file():
            raise ConfigError(
                f"{self.model_id}: {path} is not a sentence-transformers model folder (no modules.json or "
                "config.json); models are never downloaded, so give the folder a saved model lives in"
            )
        try:
            module: Any = importlib.import_module("sentence_transformers")
        except ImportError as exc:
            raise ConfigError(
                f"{self.model_id} needs torch and sentence-transformers, which are not installed; "
                f"install them with: {INSTALL}"
            ) from exc
        self.batch_size = settings.embed_batch_size
        try:
            self._model = module.SentenceTransformer(str(path), device="cpu", local_files_only=True)
        except Exception as exc:
            raise EmbeddingError(f"{self.model_id}: sentence-transformers cannot load {path}: {exc}") from exc
        # Renamed in sentence-transformers 6; the old name still works there, with a warning.
        dimension_of = getattr(self._model, "get_embedding_dimension", None) or (
            self._model.get_sentence_embedding_dimension
        )
        dimension = dimension_of()
        if not dimension:
            raise EmbeddingError(f"{self.model_id}: the model in {path} does not say its vector dimension")
        self.dimension = int(dimension)
        self.max_tokens = int(self._model.max_seq_length or 0)

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed ``texts`` as an ``(len(texts), dimension)`` float32 array of L2-normalised rows, in order."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not a single string; wrap it in a list")
        if not texts:
            return np.empty((0, self.dimension), dtype=np.float32)
        try:
            vectors = self._model.encode(
                list(texts), batch_size=self.batch_size, convert_to_numpy=True, normalize_embeddings=True
            )
        except Exception as exc:
            raise EmbeddingError(f"{self.model_id}: encoding {len(texts)} texts failed: {exc}") from exc
        return np.asarray(vectors, dtype=np.float32)
