"""Rerank: reorder the best hybrid-search candidates with a scorer that sees more than the first stage.

A :class:`Reranker` takes the query and the first stage's best candidates (best first) and returns the
best ``top_n`` of them with new scores. Providers are chosen by a string, the ``reranker`` setting or
a request's ``rerank`` field:

- ``none``: keep the first-stage order.
- ``prf``: pseudo-relevance feedback (Rocchio) on the stored chunk vectors. The query vector is moved
  towards the mean of the first stage's best few candidates, and every candidate is scored against
  it. Needs no model run, so it costs a few milliseconds.
- ``maxsim``: sentence-level max-similarity with the packaged embedder. A one-sentence claim is often
  supported by one sentence of a passage, which a passage-level vector dilutes; each candidate is
  scored by its best sentence. The sentences are embedded at rerank time, so it costs a model run
  over every sentence of every candidate (hundreds of milliseconds for 20 candidates on 2 cores).
- ``cross-encoder:<folder>``: a cross-encoder from a local folder, exported to ONNX (``model.onnx`` or
  ``onnx/model.onnx``, beside ``tokenizer.json``). A sentence-transformers folder runs only where torch
  and sentence-transformers are installed. Nothing is ever downloaded.

``prf`` and ``maxsim`` blend their signal with the first-stage score (both min-max scaled over the
candidates), since alone each ranks worse than hybrid search; a cross-encoder's score is used alone.
Blend weights were measured on SciFact (``citeline eval``); see the constants below.
:func:`rerank_hits` runs the stage (reranker, then MMR) over search hits.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import sqlalchemy as sa
from numpy.typing import NDArray

from citeline.embed.base import Embedder, available_cores, get_embedder
from citeline.errors import ConfigError, InvalidRequestError
from citeline.registry import Provider, Registry
from citeline.retrieve.fusion import min_max
from citeline.retrieve.mmr import mmr
from citeline.retrieve.query import WaitedEmbedder
from citeline.retrieve.search import Hit
from citeline.settings import Settings
from citeline.split import sentence_ends
from citeline.store.index import VectorIndex

#: Share of the ``prf`` score given to the feedback similarity (the rest is the first-stage score).
PRF_WEIGHT = 0.3
#: How many of the first stage's best candidates make the feedback, and how far they move the query.
PRF_DOCS = 3
PRF_BETA = 0.6
#: Share of the ``maxsim`` score given to the best sentence's similarity.
MAXSIM_WEIGHT = 0.3
#: Pairs per cross-encoder run, and where a pair is cut unless the tokenizer says less.
CROSS_ENCODER_BATCH = 16
CROSS_ENCODER_MAX_TOKENS = 512


@dataclass(frozen=True, slots=True)
class Candidate:
    """One chunk offered to a reranker: its text, first-stage score (higher is better) and stored vector.

    ``vector`` is set only for rerankers that declare ``needs_vectors``.
    """

    chunk_id: int
    text: str
    score: float
    vector: NDArray[np.float32] | None = None


class Reranker(Protocol):
    """Scores candidates against a query; ``spec`` is the string that chose it.

    ``needs_vectors`` says whether candidates must carry their stored chunk vectors.
    """

    spec: str
    needs_vectors: bool

    def rerank(
        self,
        query: str,
        query_vector: NDArray[np.float32],
        candidates: Sequence[Candidate],
        top_n: int,
    ) -> list[tuple[int, float]]:
        """The best ``top_n`` of ``candidates`` (given best first) as ``(chunk_id, score)``, best first.

        Equal scores keep the first-stage order.
        """
        ...


#: The reranking providers; ``none`` (keep the first-stage order) is a setting, not a provider. A
#: provider's ``build(argument, settings)`` gets the part of the spec after ``name:``.
RERANKERS: Registry[Reranker] = Registry("reranker", reserved=("none",))


def get_reranker(spec: str, settings: Settings) -> Reranker | None:
    """The reranker for ``spec``, loaded and ready, or None for ``none``.

    Rerankers that embed (``maxsim``) use the embedder the ``embedding_model`` setting names, shared
    with the search. Raises :class:`ConfigError` for an unknown provider or a model folder that cannot
    be used.
    """
    if spec.strip() == "none":
        return None
    return RERANKERS.build(spec, settings)


def best(candidates: Sequence[Candidate], scores: NDArray[np.float64], top_n: int) -> list[tuple[int, float]]:
    """``(chunk_id, score)`` of the ``top_n`` highest scores; ties keep the candidates' order."""
    order = sorted(range(len(candidates)), key=lambda i: (-scores[i], i))[:top_n]
    return [(candidates[i].chunk_id, float(scores[i])) for i in order]


class _BlendingReranker:
    """A reranker whose score blends a signal of its own with the first-stage score.

    Both are min-max scaled over the candidates, then mixed ``1 - weight`` to ``weight``: alone, each
    signal here ranks worse than hybrid search.
    """

    spec: str
    needs_vectors: bool
    weight: float

    def signal(
        self, query: str, query_vector: NDArray[np.float32], candidates: Sequence[Candidate]
    ) -> NDArray[np.float64]:
        """One score per candidate, higher is better."""
        raise NotImplementedError

    def rerank(
        self,
        query: str,
        query_vector: NDArray[np.float32],
        candidates: Sequence[Candidate],
        top_n: int,
    ) -> list[tuple[int, float]]:
        if not candidates:
            return []
        first = min_max(dict(enumerate(c.score for c in candidates)))
        own = min_max(dict(enumerate(self.signal(query, query_vector, candidates).tolist())))
        scores = np.array(
            [(1 - self.weight) * first[i] + self.weight * own[i] for i in range(len(candidates))],
            dtype=np.float64,
        )
        return best(candidates, scores, top_n)


class FeedbackReranker(_BlendingReranker):
    """``prf``: Rocchio pseudo-relevance feedback over the candidates' stored chunk vectors.

    The first stage's best ``docs`` candidates are taken as relevant: the query vector moves ``beta``
    of the way towards their mean vector, which fills in terms of the topic the query left implicit.
    """

    needs_vectors = True

    def __init__(
        self, *, docs: int = PRF_DOCS, beta: float = PRF_BETA, weight: float = PRF_WEIGHT, spec: str = "prf"
    ) -> None:
        self.spec = spec
        self.docs, self.beta, self.weight = docs, beta, weight

    def signal(
        self, query: str, query_vector: NDArray[np.float32], candidates: Sequence[Candidate]
    ) -> NDArray[np.float64]:
        vectors = _vectors(candidates)
        moved = query_vector.astype(np.float64) + self.beta * vectors[: self.docs].mean(axis=0)
        moved /= max(float(np.linalg.norm(moved)), 1e-12)
        return np.asarray(vectors @ moved, dtype=np.float64)


class SentenceMaxSimReranker(_BlendingReranker):
    """``maxsim``: each candidate scored by its sentence most similar to the query, blended with the first
    stage. Sentences are cut as the splitter cuts them and embedded with the search's own embedder.
    """

    needs_vectors = False

    def __init__(self, embedder: Embedder, *, weight: float = MAXSIM_WEIGHT, spec: str = "maxsim") -> None:
        self.spec = spec
        self.embedder = embedder
        self.weight = weight

    def signal(
        self, query: str, query_vector: NDArray[np.float32], candidates: Sequence[Candidate]
    ) -> NDArray[np.float64]:
        owners: list[int] = []
        sentences: list[str] = []
        for index, candidate in enumerate(candidates):
            for sentence in split_sentences(candidate.text):
                owners.append(index)
                sentences.append(sentence)
        similarity = self.embedder.embed(sentences) @ query_vector if sentences else np.empty(0)
        best_sentence = np.full(len(candidates), -1.0, dtype=np.float64)
        np.maximum.at(best_sentence, np.asarray(owners, dtype=np.int64), similarity.astype(np.float64))
        return best_sentence


def split_sentences(text: str) -> list[str]:
    """The non-blank sentences of ``text``, cut where the chunk splitter cuts sentences."""
    out: list[str] = []
    start = 0
    for end in [*sentence_ends(text), len(text)]:
        sentence = text[start:end].strip()
        if sentence:
            out.append(sentence)
        start = end
    return out


class CrossEncoderReranker:
    """``cross-encoder:<folder>``: a cross-encoder exported to ONNX, run with onnxruntime.

    The folder holds ``model.onnx`` (or ``onnx/model.onnx``) and ``tokenizer.json``. The model takes
    ``input_ids`` and ``attention_mask`` (and ``token_type_ids`` if it declares them) for
    ``[CLS] query [SEP] passage [SEP]`` pairs and returns one relevance logit per pair, or two class
    logits (the second being "relevant"), whose difference is used.
    """

    needs_vectors = False

    def __init__(self, folder: Path, *, spec: str | None = None, threads: int = 0) -> None:
        self.spec = spec or f"cross-encoder:{folder}"
        self.folder = folder
        model_path = onnx_model_file(folder)
        if model_path is None:
            raise ConfigError(f"reranker {self.spec}: no model.onnx or onnx/model.onnx in {folder}")
        tokenizer_path = folder / "tokenizer.json"
        if not tokenizer_path.is_file():
            raise ConfigError(
                f"reranker {self.spec}: {folder} has {model_path.name} but no tokenizer.json; copy the "
                "model's tokenizer.json into the folder"
            )
        from tokenizers import Tokenizer

        try:
            tokenizer = Tokenizer.from_file(str(tokenizer_path))
        except Exception as exc:
            raise ConfigError(f"reranker {self.spec}: cannot read {tokenizer_path}: {exc}") from exc
        limit = (tokenizer.truncation or {}).get("max_length") or CROSS_ENCODER_MAX_TOKENS
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=min(int(limit), CROSS_ENCODER_MAX_TOKENS))
        self._tokenizer = tokenizer
        self._session = _open_session(self.spec, model_path, threads or available_cores())
        inputs = {i.name for i in self._session.get_inputs()}
        missing = {"input_ids", "attention_mask"} - inputs
        if missing:
            raise ConfigError(
                f"reranker {self.spec}: {model_path} lacks the inputs {sorted(missing)}; "
                "a cross-encoder export takes input_ids and attention_mask"
            )
        self._token_types = "token_type_ids" in inputs
        self._output = self._session.get_outputs()[0].name
        # One session, called from whichever thread searches: onnxruntime's run is thread-safe, but the
        # tokenizer's settings are shared state, so encoding is serialised.
        self._lock = threading.Lock()

    def rerank(
        self,
        query: str,
        query_vector: NDArray[np.float32],
        candidates: Sequence[Candidate],
        top_n: int,
    ) -> list[tuple[int, float]]:
        if not candidates:
            return []
        with self._lock:
            encodings = self._tokenizer.encode_batch([(query, c.text) for c in candidates])
        scores = np.empty(len(candidates), dtype=np.float64)
        for start in range(0, len(encodings), CROSS_ENCODER_BATCH):
            batch = encodings[start : start + CROSS_ENCODER_BATCH]
            scores[start : start + len(batch)] = self._run(batch)
        return best(candidates, scores, top_n)

    def _run(self, batch: Sequence[Any]) -> NDArray[np.float64]:
        width = max(len(e.ids) for e in batch)
        ids = np.zeros((len(batch), width), dtype=np.int64)
        types = np.zeros_like(ids)
        mask = np.zeros_like(ids)
        for row, encoding in enumerate(batch):
            n = len(encoding.ids)
            ids[row, :n] = encoding.ids
            types[row, :n] = encoding.type_ids
            mask[row, :n] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if self._token_types:
            feeds["token_type_ids"] = types
        try:
            logits = np.asarray(self._session.run([self._output], feeds)[0], dtype=np.float64)
        except Exception as exc:
            raise ConfigError(
                f"reranker {self.spec}: onnxruntime failed on {len(batch)} pairs: {exc}"
            ) from exc
        logits = logits.reshape(len(batch), -1)
        if logits.shape[1] == 1:
            return logits[:, 0]
        if logits.shape[1] == 2:
            return logits[:, 1] - logits[:, 0]
        raise ConfigError(
            f"reranker {self.spec}: the model returns {logits.shape[1]} scores per pair; a cross-encoder "
            "returns one relevance logit (or two class logits)"
        )


class SentenceTransformersCrossEncoder:
    """A sentence-transformers ``CrossEncoder`` folder, for installs that have torch."""

    needs_vectors = False

    def __init__(self, folder: Path, module: Any, *, spec: str) -> None:
        self.spec = spec
        try:
            self._model = module.CrossEncoder(str(folder), local_files_only=True)
        except Exception as exc:
            raise ConfigError(f"reranker {spec}: sentence-transformers cannot load {folder}: {exc}") from exc

    def rerank(
        self,
        query: str,
        query_vector: NDArray[np.float32],
        candidates: Sequence[Candidate],
        top_n: int,
    ) -> list[tuple[int, float]]:
        if not candidates:
            return []
        raw = self._model.predict([(query, c.text) for c in candidates], batch_size=CROSS_ENCODER_BATCH)
        scores = np.asarray(raw, dtype=np.float64).reshape(len(candidates), -1)
        signal = scores[:, 0] if scores.shape[1] == 1 else scores[:, 1] - scores[:, 0]
        return best(candidates, signal, top_n)


def onnx_model_file(folder: Path) -> Path | None:
    """A cross-encoder folder's ONNX export: ``model.onnx``, or ``onnx/model.onnx`` as Optimum writes it."""
    for model in (folder / "model.onnx", folder / "onnx" / "model.onnx"):
        if model.is_file():
            return model
    return None


def _open_session(spec: str, path: Path, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # One call per search scores every pair, so it may use every core.
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    try:
        return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise ConfigError(f"reranker {spec}: onnxruntime cannot load {path}: {exc}") from exc


def _cross_encoder(argument: str, settings: Settings) -> Reranker:
    spec = f"cross-encoder:{argument}"
    folder = Path(argument).expanduser()
    if not folder.is_dir():
        raise ConfigError(f"reranker {spec}: {folder} is not a folder (models are never downloaded)")
    if onnx_model_file(folder) is not None:
        return CrossEncoderReranker(folder, spec=spec)
    if not (folder / "config.json").is_file():
        raise ConfigError(
            f"reranker {spec}: {folder} holds neither model.onnx (or onnx/model.onnx) with tokenizer.json, "
            "nor a sentence-transformers model (config.json)"
        )
    try:
        module = importlib.import_module("sentence_transformers")
    except ImportError as exc:
        raise ConfigError(
            f"reranker {spec}: {folder} is a sentence-transformers model, which needs torch and "
            "sentence-transformers (not installed). Install them (pip install sentence-transformers), or "
            "export the model to ONNX, e.g. optimum-cli export onnx --task text-classification --model "
            f"{folder} {folder}/onnx, and copy tokenizer.json beside it"
        ) from exc
    return SentenceTransformersCrossEncoder(folder, module, spec=spec)


def _maxsim(argument: str, settings: Settings) -> Reranker:
    # A search waits for these sentences, as it waits for its query: they embed on the query session,
    # so a serving process never opens the ingest session beside it for them.
    embedder = get_embedder(settings.embedding_model, settings)
    return SentenceMaxSimReranker(WaitedEmbedder(embedder, settings.query_threads))


RERANKERS.register(
    Provider(
        "prf",
        build=lambda _argument, _settings: FeedbackReranker(),
        about="pseudo-relevance feedback on the stored chunk vectors (a few ms)",
        example="prf",
        model="none",
    )
)
RERANKERS.register(
    Provider(
        "maxsim",
        build=_maxsim,
        about="each candidate scored by its sentence most similar to the query (embeds per search)",
        example="maxsim",
        model="none",
        settings=("embedding_model",),
    )
)
RERANKERS.register(
    Provider(
        "cross-encoder",
        build=_cross_encoder,
        about="a cross-encoder from a local folder: ONNX, or sentence-transformers with torch",
        example="cross-encoder:/models/ms-marco-MiniLM-L-6-v2",
        placeholder="folder",
    )
)


def _vectors(candidates: Sequence[Candidate]) -> NDArray[np.float64]:
    if any(c.vector is None for c in candidates):
        raise ValueError("this reranker needs every candidate's vector; read them with VectorIndex.vectors()")
    return np.stack([np.asarray(c.vector, dtype=np.float64) for c in candidates])


def rerank_hits(
    conn: sa.Connection,
    hits: Sequence[Hit],
    *,
    query: str,
    query_vector: NDArray[np.float32],
    reranker: Reranker | None,
    depth: int,
    top_k: int,
    mmr_lambda: float | None,
    vector_index: VectorIndex,
) -> list[Hit]:
    """The stage after hybrid search: rerank the first ``depth`` hits, then diversify them by MMR.

    Hits beyond ``depth`` follow in their first-stage order. With ``mmr_lambda`` the first ``top_k``
    places are chosen by :func:`~citeline.retrieve.mmr.mmr` among the ``depth`` best, using the stored
    chunk vectors; the relevance it trades against redundancy is the reranker's score when there is one.
    """
    if mmr_lambda is not None and not 0.0 <= mmr_lambda <= 1.0:
        raise InvalidRequestError(f"mmr_lambda must be in [0, 1] (1 keeps the ranking), got {mmr_lambda}")
    head, tail = list(hits[:depth]), list(hits[depth:])
    if not head:
        return []
    wanted = mmr_lambda is not None or (reranker is not None and reranker.needs_vectors)
    vectors = vector_index.vectors(conn, [h.chunk_id for h in head]) if wanted else {}
    # A chunk retired since the search has no vector any more; it cannot be compared, so it goes.
    if wanted:
        head = [h for h in head if h.chunk_id in vectors]
    scores = [h.fused_score for h in head]
    if reranker is not None:
        candidates = [Candidate(h.chunk_id, h.text, h.fused_score, vectors.get(h.chunk_id)) for h in head]
        ranked = reranker.rerank(query, query_vector, candidates, len(candidates))
        by_id = {h.chunk_id: h for h in head}
        head = [replace(by_id[chunk_id], rerank_score=score) for chunk_id, score in ranked]
        scores = [score for _, score in ranked]
    if mmr_lambda is not None and head:
        matrix = np.stack([vectors[h.chunk_id] for h in head])
        picked = mmr(scores, matrix, k=min(top_k, len(head)), lambda_=mmr_lambda)
        chosen = set(picked)
        head = [head[i] for i in picked] + [h for i, h in enumerate(head) if i not in chosen]
    return (head + tail)[:top_k]
