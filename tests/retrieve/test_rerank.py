"""Reranking: each reranker orders candidates as promised; search reranks a deeper pool than it returns.

No cross-encoder weights can be downloaded here, so the cross-encoder provider is run on a tiny ONNX model
built in the test with the signature of a real export (``input_ids``, ``attention_mask``,
``token_type_ids`` -> one logit per pair). Its logit counts one word in the passage segment of the pair,
so the right order is known; the tokenizer is the real one packaged with the embedder.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer

from citeline.embed.onnx import MODELS, OnnxEmbedder
from citeline.engine import Citeline
from citeline.errors import ConfigError, InvalidRequestError
from citeline.retrieve.query import WaitedEmbedder
from citeline.retrieve.rerank import (
    CROSS_ENCODER_BATCH,
    Candidate,
    CrossEncoderReranker,
    FeedbackReranker,
    SentenceMaxSimReranker,
    get_reranker,
    split_sentences,
)
from citeline.retrieve.search import Hit, SearchRequest, Timings
from citeline.settings import Settings
from tests.conftest import write

PUMP_SEALS = {
    "faces.txt": "The mechanical seal of the pump leaks when its faces are worn or cracked.",
    "kit.txt": "A leaking shaft seal lets water drip from the pump casing; replace the seal kit.",
    "dry.txt": "Seal leaks on centrifugal pumps often start after the pump ran dry.",
    "harbour.txt": "Harbour seals haul out on the rocks at low tide to rest.",
    "orings.txt": "Replace the O-rings and the carbon face when the pump drips at the shaft.",
}

CLAIM = "Vitamin D supplements lower the risk of hip fractures in older women."
# The claim is one sentence among unrelated methods sentences: the passage as a whole is about little.
DILUTED = (
    "Participants were recruited from twelve general practices in Leeds between 2001 and 2004. "
    "Questionnaires on diet, smoking and alcohol were completed at baseline. "
    "Blood samples were frozen at minus eighty degrees for later assays. "
    "Vitamin D supplements lowered the risk of hip fractures in older women. "
    "Follow-up visits took place every two years and retention exceeded ninety percent. "
    "Statistical analyses used Cox models adjusted for age, income and region."
)
# On topic throughout, but no sentence says what the claim says.
GENERAL = (
    "Hip fractures in older women are a major cause of disability. "
    "Vitamin D and calcium status are studied as risk factors for fractures in the elderly. "
    "Falls, osteoporosis and low bone density raise the fracture risk of older women."
)


def _ingest(cl: Citeline, tmp_path: Path, texts: dict[str, str]) -> dict[str, Hit]:
    """Ingest ``texts`` (one chunk each) and return each document's hit, by name."""
    cl.ingest([write(tmp_path / name, text) for name, text in texts.items()])
    hits = cl.search(SearchRequest("anything", top_k=50, rerank="none"))
    assert len(hits) == len(texts)
    return {h.document_name: h for h in hits}


def _candidates(cl: Citeline, hits: list[Hit], scores: list[float]) -> list[Candidate]:
    with cl.engine.connect() as conn:
        vectors = cl.vector_index.vectors(conn, [h.chunk_id for h in hits])
    return [Candidate(h.chunk_id, h.text, s, vectors[h.chunk_id]) for h, s in zip(hits, scores, strict=True)]


# -- prf ----------------------------------------------------------------------------------------------


def test_prf_prefers_the_topic_of_the_best_hits_over_a_word_shared_with_the_query(
    cl: Citeline, tmp_path: Path
) -> None:
    by_name = _ingest(cl, tmp_path, PUMP_SEALS)
    query = "seal leaking"
    query_vector = cl.embedder.embed([query])[0]
    order = ["faces.txt", "kit.txt", "dry.txt", "harbour.txt", "orings.txt"]
    # The last two tie in the first stage; by the query alone the harbour seals come first.
    candidates = _candidates(cl, [by_name[n] for n in order], [1.0, 0.9, 0.8, 0.3, 0.3])
    harbour, orings = candidates[3], candidates[4]
    assert harbour.vector is not None and orings.vector is not None
    assert harbour.vector @ query_vector > orings.vector @ query_vector

    ranked = FeedbackReranker().rerank(query, query_vector, candidates, top_n=5)

    names = {by_name[n].chunk_id: n for n in order}
    assert [names[c] for c, _ in ranked] == ["faces.txt", "kit.txt", "dry.txt", "orings.txt", "harbour.txt"]
    assert [s for _, s in ranked] == sorted((s for _, s in ranked), reverse=True)
    assert len(FeedbackReranker().rerank(query, query_vector, candidates, top_n=2)) == 2


def test_prf_without_feedback_weight_keeps_the_first_stage_order(cl: Citeline, tmp_path: Path) -> None:
    by_name = _ingest(cl, tmp_path, PUMP_SEALS)
    hits = list(by_name.values())
    candidates = _candidates(cl, hits, [5.0, 4.0, 3.0, 2.0, 1.0])
    ranked = FeedbackReranker(weight=0.0).rerank("seal", cl.embedder.embed(["seal"])[0], candidates, 5)
    assert [c for c, _ in ranked] == [h.chunk_id for h in hits]


# -- maxsim ---------------------------------------------------------------------------------------------


def test_maxsim_finds_the_one_sentence_that_states_the_claim(cl: Citeline, tmp_path: Path) -> None:
    by_name = _ingest(cl, tmp_path, {"diluted.txt": DILUTED, "general.txt": GENERAL})
    query_vector = cl.embedder.embed([CLAIM])[0]
    diluted, general = by_name["diluted.txt"], by_name["general.txt"]
    candidates = _candidates(cl, [general, diluted], [0.5, 0.5])
    # Whole passages say the opposite of what the sentences say.
    assert candidates[0].vector is not None and candidates[1].vector is not None
    assert candidates[0].vector @ query_vector > candidates[1].vector @ query_vector

    ranked = SentenceMaxSimReranker(cl.embedder).rerank(CLAIM, query_vector, candidates, top_n=2)

    assert [c for c, _ in ranked] == [diluted.chunk_id, general.chunk_id]


def test_maxsim_embeds_its_sentences_on_the_query_session(cl: Citeline, tmp_path: Path) -> None:
    # A search waits for the sentences as for its query: a serving process never opens the ingest
    # session (about 100 MB) for them.
    reranker = get_reranker("maxsim", cl.settings)
    assert isinstance(reranker, SentenceMaxSimReranker) and isinstance(reranker.embedder, WaitedEmbedder)
    assert reranker.embedder.threads == cl.settings.query_threads

    by_name = _ingest(cl, tmp_path, {"diluted.txt": DILUTED, "general.txt": GENERAL})
    diluted, general = by_name["diluted.txt"], by_name["general.txt"]
    candidates = _candidates(cl, [general, diluted], [0.5, 0.5])
    fresh = OnnxEmbedder("all-MiniLM-L6-v2")
    query_vector = fresh.embed_query(CLAIM, threads=2)
    ranked = SentenceMaxSimReranker(WaitedEmbedder(fresh, 2)).rerank(CLAIM, query_vector, candidates, top_n=2)
    assert [c for c, _ in ranked] == [diluted.chunk_id, general.chunk_id]
    assert fresh._ingest is None


def test_maxsim_still_weighs_the_first_stage(cl: Citeline, tmp_path: Path) -> None:
    by_name = _ingest(cl, tmp_path, {"diluted.txt": DILUTED, "general.txt": GENERAL})
    query_vector = cl.embedder.embed([CLAIM])[0]
    pool = [by_name["general.txt"], by_name["diluted.txt"]]
    candidates = _candidates(cl, pool, [1.0, 0.0])
    blended = SentenceMaxSimReranker(cl.embedder).rerank(CLAIM, query_vector, candidates, top_n=2)
    sentences_only = SentenceMaxSimReranker(cl.embedder, weight=1.0).rerank(
        CLAIM, query_vector, candidates, top_n=2
    )
    assert [c for c, _ in blended] == [pool[0].chunk_id, pool[1].chunk_id]
    assert [c for c, _ in sentences_only] == [pool[1].chunk_id, pool[0].chunk_id]


def test_sentences_are_cut_as_the_splitter_cuts_them() -> None:
    assert split_sentences("Dose was 2.5 mg (Smith et al. 2004). It worked!  Then?\n") == [
        "Dose was 2.5 mg (Smith et al. 2004).",
        "It worked!",
        "Then?",
    ]


# -- cross-encoder --------------------------------------------------------------------------------------


def _counting_cross_encoder(folder: Path, word: str, *, logits: int = 1, token_types: bool = True) -> Path:
    """A cross-encoder-shaped ONNX model whose relevance logit counts ``word`` in the passage segment.

    Without ``token_types`` it cannot tell query from passage and counts the word in both.
    """
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer_path = folder / "tokenizer.json"
    shutil.copy(MODELS["all-MiniLM-L6-v2"].locate().tokenizer.path, tokenizer_path)
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    weights = np.zeros(tokenizer.get_vocab_size(), dtype=np.float32)
    token = tokenizer.token_to_id(word)
    assert token is not None, f"{word!r} is not one token of the vocabulary"
    weights[token] = 1.0
    ints = [
        helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "tokens"])
        for name in ("input_ids", "attention_mask", *(["token_type_ids"] if token_types else []))
    ]
    nodes = [
        helper.make_node("Gather", ["weights", "input_ids"], ["is_word"]),
        helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["is_word", "mask"], ["seen"]),
    ]
    counted = "seen"
    if token_types:
        nodes += [
            helper.make_node("Cast", ["token_type_ids"], ["passage"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["seen", "passage"], ["in_passage"]),
        ]
        counted = "in_passage"
    nodes.append(helper.make_node("ReduceSum", [counted, "axis"], ["count"], keepdims=1))
    if logits == 2:
        nodes += [
            helper.make_node("Neg", ["count"], ["against"]),
            helper.make_node("Concat", ["against", "count"], ["logits"], axis=1),
        ]
    else:
        nodes.append(helper.make_node("Identity", ["count"], ["logits"]))
    graph = helper.make_graph(
        nodes,
        "counting-cross-encoder",
        ints,
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", logits])],
        initializer=[
            numpy_helper.from_array(weights, "weights"),
            numpy_helper.from_array(np.array([1], dtype=np.int64), "axis"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, folder / "model.onnx")
    return folder


@pytest.mark.parametrize(
    ("logits", "token_types"), [(1, True), (2, True), (1, False)], ids=["one-logit", "two-logits", "no-types"]
)
def test_cross_encoder_orders_passages_by_its_logits(tmp_path: Path, logits: int, token_types: bool) -> None:
    folder = _counting_cross_encoder(tmp_path / "ce", "valve", logits=logits, token_types=token_types)
    reranker = CrossEncoderReranker(folder)
    # More candidates than one run takes, of different lengths, so runs are padded and split.
    counts = [(i * 7) % 5 for i in range(CROSS_ENCODER_BATCH + 6)]
    candidates = [
        Candidate(1000 + i, " ".join(["the valve"] * n + ["is part of the pump"] * (i % 3 + 1)), 0.0)
        for i, n in enumerate(counts)
    ]
    # "valve" in the query is in the first segment: only a model without token types sees it.
    ranked = reranker.rerank("stuck valve", np.zeros(384, dtype=np.float32), candidates, top_n=len(counts))

    expected = sorted(range(len(counts)), key=lambda i: (-counts[i], i))
    assert [c for c, _ in ranked] == [1000 + i for i in expected]
    offset = 0 if token_types else 1
    assert [s for _, s in ranked] == [pytest.approx(logits * (counts[i] + offset)) for i in expected]
    assert len(reranker.rerank("valve", np.zeros(384, dtype=np.float32), candidates, top_n=3)) == 3


def test_a_cross_encoder_is_loaded_from_onnx_slash_model_onnx_too(tmp_path: Path) -> None:
    folder = _counting_cross_encoder(tmp_path / "ce", "valve")
    (folder / "onnx").mkdir()
    (folder / "model.onnx").rename(folder / "onnx" / "model.onnx")
    reranker = get_reranker(f"cross-encoder:{folder}", Settings())
    assert isinstance(reranker, CrossEncoderReranker)


def test_cross_encoder_folders_that_cannot_be_used_say_why(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a folder"):
        get_reranker(f"cross-encoder:{tmp_path / 'missing'}", Settings())
    with pytest.raises(
        ConfigError, match=r"reranker 'cross-encoder' names no folder: write cross-encoder:<folder>"
    ):
        get_reranker("cross-encoder", Settings())
    folder = _counting_cross_encoder(tmp_path / "ce", "valve")
    (folder / "tokenizer.json").unlink()
    with pytest.raises(ConfigError, match=r"no tokenizer\.json"):
        get_reranker(f"cross-encoder:{folder}", Settings())
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match=r"neither model\.onnx"):
        get_reranker(f"cross-encoder:{empty}", Settings())


@pytest.mark.skipif(
    importlib.util.find_spec("sentence_transformers") is not None, reason="sentence-transformers is installed"
)
def test_a_sentence_transformers_folder_without_torch_says_what_to_install(tmp_path: Path) -> None:
    write(tmp_path / "st" / "config.json", '{"architectures": ["BertForSequenceClassification"]}')
    with pytest.raises(ConfigError, match=r"needs torch and sentence-transformers.*export the model to ONNX"):
        get_reranker(f"cross-encoder:{tmp_path / 'st'}", Settings())


# -- the rerank stage in search ---------------------------------------------------------------------------


def test_search_reranks_a_deeper_pool_than_it_returns(cl: Citeline, tmp_path: Path) -> None:
    texts = {
        "prime.txt": "Prime the centrifugal pump by filling its casing before starting it.",
        "vent.txt": "Open the vent plug while priming the pump until no air comes out.",
        "valve.txt": "A valve sticks; a stuck valve stops the flow. Check each valve yearly.",
    }
    cl.ingest([write(tmp_path / name, text) for name, text in texts.items()])
    folder = _counting_cross_encoder(tmp_path / "ce", "valve")
    first = cl.search(SearchRequest("priming the pump", rerank="none"))
    assert first[0].document_name != "valve.txt"

    timings = Timings()
    [best] = cl.search(
        SearchRequest("priming the pump", top_k=1, rerank=f"cross-encoder:{folder}"), timings=timings
    )

    assert best.document_name == "valve.txt"
    assert best.rerank_score == pytest.approx(3.0)  # "valve" three times: the model's own logit
    assert timings.rerank > 0
    assert all(h.rerank_score is None for h in first)


def test_search_uses_the_reranker_setting_and_a_request_can_turn_it_off(cl: Citeline, tmp_path: Path) -> None:
    texts = {name: PUMP_SEALS[name] for name in ("faces.txt", "harbour.txt", "orings.txt")}
    cl.ingest([write(tmp_path / name, text) for name, text in texts.items()])
    folder = _counting_cross_encoder(tmp_path / "ce", "shaft")
    with cl.derive(reranker=f"cross-encoder:{folder}") as configured:
        reranked = configured.search("seal leaking")
        plain = configured.search(SearchRequest("seal leaking", rerank="none"))

    assert reranked[0].document_name == "orings.txt"
    assert plain[0].document_name == "faces.txt"
    assert sorted(h.chunk_id for h in reranked) == sorted(h.chunk_id for h in plain)


def test_an_unknown_reranker_is_a_bad_request_or_a_bad_setting(cl: Citeline, tmp_path: Path) -> None:
    cl.ingest([write(tmp_path / "a.txt", PUMP_SEALS["faces.txt"])])
    with pytest.raises(InvalidRequestError, match="unknown reranker provider 'colbert' in 'colbert'"):
        cl.search(SearchRequest("seal", rerank="colbert"))
    with pytest.raises(InvalidRequestError, match="reranker provider prf takes no model, got 'prf:3'"):
        cl.search(SearchRequest("seal", rerank="prf:3"))
    with (
        cl.derive(reranker="colbert") as configured,
        pytest.raises(ConfigError, match="known providers: cross-encoder:<folder>, maxsim, none, prf"),
    ):
        configured.search("seal")
