"""The local provider on the real packaged Qwen2.5-Coder-0.5B-Instruct: answers, repeatability, limits,
and the packaged weights joined, pinned and rebuilt."""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Generator
from pathlib import Path

import pytest

from citeline.answer.llm import LLM, GenerationOptions, Message, complete, get_llm
from citeline.answer.prompt import system_prompt
from citeline.answer.providers.local import MODELS, LocalLLM, PackagedModel, Piece, joined_model
from citeline.errors import ConfigError, GenerationError
from citeline.settings import Settings

from .conftest import LOCAL_SPEC as SPEC

MODEL = MODELS["qwen2.5-coder-0.5b-instruct"]
QUESTION = [
    Message("system", "Answer the question from the passage only. Be brief."),
    Message(
        "user",
        "Passage: The Harlow Bridge over the river Ness opened in 1932 and is 412 metres long.\n\n"
        "Question: In which year did the Harlow Bridge open?",
    ),
]
SHORT = GenerationOptions(max_tokens=24)


@pytest.fixture(scope="module")
def reference_answer(local_llm: LocalLLM) -> str:
    """The model's whole answer to :data:`QUESTION`, which every later run must repeat exactly."""
    return complete(local_llm, QUESTION, SHORT)


def sha256(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


@pytest.mark.slow
def test_the_packaged_model_answers_from_the_passage_in_streamed_pieces(
    local_llm: LLM, reference_answer: str
) -> None:
    pieces = list(local_llm.stream(QUESTION, SHORT))

    assert len(pieces) > 1
    assert "1932" in "".join(pieces)
    assert "".join(pieces) == reference_answer
    assert local_llm.model_id == SPEC


@pytest.mark.slow
def test_a_sampled_answer_repeats_exactly(local_llm: LLM) -> None:
    prompt = [Message("user", "Write one sentence about rivers.")]
    sampled = GenerationOptions(max_tokens=12, temperature=0.9)

    assert complete(local_llm, prompt, sampled) == complete(local_llm, prompt, sampled)


@pytest.mark.slow
def test_max_tokens_cuts_the_reply(local_llm: LLM, reference_answer: str) -> None:
    cut = complete(local_llm, QUESTION, GenerationOptions(max_tokens=2))

    assert cut
    assert len(cut) < len(reference_answer)
    assert reference_answer.startswith(cut)


@pytest.mark.slow
def test_threads_share_one_model_and_each_gets_its_own_whole_answer(
    local_llm: LLM, reference_answer: str
) -> None:
    answers: list[str] = []

    def ask() -> None:
        answers.append(complete(local_llm, QUESTION, SHORT))

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert answers == [reference_answer, reference_answer]


@pytest.mark.slow
def test_concurrent_answers_each_read_the_system_prompt_from_the_cache(local_llm: LocalLLM) -> None:
    # The answer path's own system prompt, about 130 tokens, with two questions asked at once: the
    # second waits for the model, and must still find the system prompt cached (primed after the first).
    system = Message("system", system_prompt("general"))
    questions = [
        Message(
            "user",
            "Sources:\n\n[1] Bridges\nThe Harlow Bridge opened in 1932.\n\nQuestion: When did it open?",
        ),
        Message("user", "Sources:\n\n[1] Rivers\nThe Ness is 12 km long.\n\nQuestion: How long is the Ness?"),
    ]
    complete(local_llm, [system, questions[0]], SHORT)  # the cache now holds this system prompt
    threads = [
        threading.Thread(target=complete, args=(local_llm, [system, question], SHORT))
        for question in questions
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    readings = list(local_llm.readings)[-2:]
    assert len(readings) == 2
    for reading in readings:
        assert reading.cached >= 100, readings  # the system prompt, not read again
        assert 0 < reading.read < 60, readings  # the question and its passage only


@pytest.mark.slow
def test_a_prompt_beyond_the_context_is_a_generation_error_naming_the_setting(local_llm: LLM) -> None:
    too_long = [Message("user", "word " * 5000)]

    with pytest.raises(GenerationError, match=r"4096-token context.*llm_context") as caught:
        complete(local_llm, too_long, SHORT)
    assert SPEC in str(caught.value)


@pytest.mark.slow
def test_a_reply_late_past_the_timeout_is_cut_and_the_model_serves_the_next_request(
    local_llm: LLM, reference_answer: str
) -> None:
    with pytest.raises(GenerationError, match=r"no complete reply within 0\.05 s"):
        complete(local_llm, QUESTION, GenerationOptions(max_tokens=64, timeout=0.05))

    assert complete(local_llm, QUESTION, SHORT) == reference_answer


@pytest.mark.slow
def test_an_abandoned_stream_does_not_hold_the_model(local_llm: LLM, reference_answer: str) -> None:
    stream = local_llm.stream([Message("user", "Count from 1 to 100.")], GenerationOptions(max_tokens=300))
    assert isinstance(stream, Generator)
    assert next(stream)
    stream.close()

    assert complete(local_llm, QUESTION, SHORT) == reference_answer


@pytest.mark.slow
def test_the_joined_file_is_the_pinned_one_and_is_joined_once(local_llm: LocalLLM, data_dir: Path) -> None:
    local_llm.load()
    path = data_dir / "models" / f"{MODEL.name}.gguf"
    written = path.stat().st_mtime_ns

    assert joined_model(MODEL, data_dir) == path
    assert path.stat().st_size == MODEL.stored.size
    assert sha256(path) == MODEL.stored.sha256
    assert path.stat().st_mtime_ns == written
    assert sorted(p.name for p in path.parent.iterdir() if p.name.endswith(".partial")) == []


@pytest.mark.slow
def test_a_damaged_file_is_rebuilt_once_by_concurrent_callers(tmp_path: Path) -> None:
    target = tmp_path / "models" / f"{MODEL.name}.gguf"
    target.parent.mkdir()
    target.write_bytes(b"GGUF" + b"\0" * 1000)
    start = threading.Barrier(2)
    paths: list[Path] = []

    def join() -> None:
        start.wait()
        paths.append(joined_model(MODEL, tmp_path))

    threads = [threading.Thread(target=join) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert paths == [target, target]
    assert sha256(target) == MODEL.stored.sha256
    assert sorted(p.name for p in target.parent.iterdir()) == [
        f"{MODEL.name}.gguf",
        f"{MODEL.name}.gguf.lock",
    ]


def test_pieces_that_do_not_join_into_the_pinned_digest_leave_no_file(tmp_path: Path) -> None:
    last = MODEL.pieces[-1]
    wrong = PackagedModel("wrong-digest", (last,), size=1, sha256="0" * 64, install="pip install it")

    reinstall = rf"not the pinned 0{{64}}.*--force-reinstall.*{re.escape(last.requirement)}"
    with pytest.raises(GenerationError, match=reinstall):
        joined_model(wrong, tmp_path)
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["wrong-digest.gguf.lock"]


def test_a_missing_piece_package_says_which_pip_install_fixes_it(tmp_path: Path) -> None:
    absent = PackagedModel(
        "absent",
        (Piece("citeline-absent-part1", "1.0", "citeline_absent_part1/data/part01.bin"),),
        size=1,
        sha256="0" * 64,
        install="pip install 'citeline-absent-part1==1.0'",
    )

    with pytest.raises(GenerationError, match=r"citeline-absent-part1, which is not installed.*pip install"):
        joined_model(absent, tmp_path)


def test_another_release_of_a_piece_package_is_refused(tmp_path: Path) -> None:
    first = MODEL.pieces[0]
    other = PackagedModel(
        "other-release", (Piece(first.distribution, "0.0.1", first.path),), 1, "0" * 64, MODEL.install
    )

    refused = rf"needs {first.distribution}==0\.0\.1, but .* 0\.9\.0 is installed"
    with pytest.raises(GenerationError, match=refused):
        joined_model(other, tmp_path)


def test_an_unknown_model_name_is_a_config_error_listing_the_packaged_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=rf"unknown local model 'llama-9000'.*{re.escape(SPEC)}"):
        get_llm("local:llama-9000", Settings(data_dir=tmp_path))
    with pytest.raises(ConfigError, match="LLM 'local:' names no model: write local:<model>"):
        get_llm("local:", Settings(data_dir=tmp_path))


def test_a_path_that_is_not_a_gguf_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    text = tmp_path / "notes.gguf"
    text.write_text("not a model")
    absent = tmp_path / "absent.gguf"

    with pytest.raises(ConfigError, match=rf"{re.escape(str(text))} is not a GGUF file"):
        get_llm(f"local:{text}", Settings(data_dir=tmp_path))
    with pytest.raises(ConfigError, match=rf"cannot read the model file {re.escape(str(absent))}"):
        get_llm(f"local:{absent}", Settings(data_dir=tmp_path))


@pytest.mark.slow
def test_a_gguf_file_of_ones_own_is_served_by_path(
    local_llm: LocalLLM, reference_answer: str, data_dir: Path
) -> None:
    local_llm.load()
    path = data_dir / "models" / f"{MODEL.name}.gguf"
    llm = get_llm(f"local:{path}", Settings(data_dir=data_dir))
    try:
        assert llm.model_id == f"local:{path}"
        assert complete(llm, QUESTION, SHORT) == reference_answer
    finally:
        llm.close()
