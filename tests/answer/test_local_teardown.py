"""The local model at the end of its life: closing it, and a process exiting right after an answer.

llama.cpp computes on threads of its own; a process that exits while one of them still computes (the
priming of the prompt cache after a reply) crashes in llama.cpp's C++ static destructors, after the
answer was printed. These tests hold that no llama.cpp work outlives :meth:`LocalLLM.close`, nor the
interpreter's wait for its threads at exit.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from citeline.answer.llm import GenerationOptions, Message
from citeline.answer.providers.local import LocalLLM
from citeline.errors import GenerationError
from citeline.settings import Settings

from .conftest import LOCAL_SPEC
from .test_providers_local import QUESTION

MODEL = LOCAL_SPEC.removeprefix("local:")


def llm_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "citeline-llm" and t.is_alive()]


def read_in_daemon_thread(llm: LocalLLM, options: GenerationOptions) -> list[str]:
    """The reply, read as citeline.answer reads it: on a daemon thread."""
    pieces: list[str] = []
    errors: list[BaseException] = []

    def read() -> None:
        try:
            pieces.extend(llm.stream(QUESTION, options))
        except BaseException as exc:
            errors.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join()
    if errors:
        raise errors[0]
    return pieces


@pytest.fixture
def own_llm(local_llm: LocalLLM, data_dir: Path) -> Iterator[LocalLLM]:
    """A model of its own (the session's ``local_llm`` joined the GGUF), closed by the test."""
    llm = LocalLLM(MODEL, Settings(data_dir=data_dir))
    yield llm
    llm.close()


@pytest.mark.slow
def test_closing_right_after_a_reply_leaves_no_llama_cpp_work_running(own_llm: LocalLLM) -> None:
    reply = "".join(read_in_daemon_thread(own_llm, GenerationOptions(max_tokens=24)))
    assert "1932" in reply

    # The reply is done; the priming of the cache for the next request is what may still run.
    own_llm.close()

    assert llm_threads() == []


@pytest.mark.slow
def test_closing_mid_reply_stops_it_at_its_next_token_and_the_model_serves_again(
    own_llm: LocalLLM,
) -> None:
    long = GenerationOptions(max_tokens=2000, timeout=600)
    first_piece = threading.Event()
    outcome: list[BaseException | str] = []

    def read() -> None:
        text = ""
        try:
            for piece in own_llm.stream([Message("user", "Count from 1 to 5000, comma separated.")], long):
                text += piece
                first_piece.set()
            outcome.append(text)
        except BaseException as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert first_piece.wait(120)
    started = time.monotonic()
    own_llm.close()
    closed_in = time.monotonic() - started
    reader.join(30)

    assert closed_in < 10  # a token or two, not the remaining ~2000
    assert llm_threads() == []
    assert len(outcome) == 1 and isinstance(outcome[0], GenerationError), outcome
    assert "closed during the reply" in str(outcome[0])
    # Closed is unloaded, not broken: the next request loads the model again.
    assert "1932" in "".join(own_llm.stream(QUESTION, GenerationOptions(max_tokens=24)))


@pytest.mark.slow
def test_a_process_exiting_right_after_an_answer_waits_for_the_models_work(
    local_llm: LocalLLM, data_dir: Path, tmp_path: Path
) -> None:
    # The reply is read as `citeline ask` reads it (a daemon thread of citeline.answer) and the model
    # is never closed. atexit handlers run after the interpreter's wait for its non-daemon threads and
    # before it tears down: a llama.cpp thread alive then computes on into the C++ static destructors.
    pairs = [(m.role, m.content) for m in QUESTION]
    script = tmp_path / "answer_and_exit.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import asyncio, atexit, threading
            from pathlib import Path
            from citeline.answer.answer import _generate
            from citeline.answer.llm import GenerationOptions, Message
            from citeline.answer.providers.local import LocalLLM
            from citeline.settings import Settings

            def report():
                alive = [t.name for t in threading.enumerate() if t.name == "citeline-llm"]
                print("alive at exit:", alive, flush=True)

            atexit.register(report)
            llm = LocalLLM({MODEL!r}, Settings(data_dir=Path({str(data_dir)!r})))
            messages = [Message(role, content) for role, content in {pairs!r}]

            async def main():
                return "".join([p async for p in _generate(llm, messages, GenerationOptions(max_tokens=24))])

            print("reply:", asyncio.run(main()), flush=True)
            """
        )
    )

    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)

    assert run.returncode == 0, run.stderr[-2000:]
    assert "1932" in run.stdout
    assert "alive at exit: []" in run.stdout, run.stdout
