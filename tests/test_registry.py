"""One ``provider:model`` parser and one provider shape for embedders, answering models and rerankers."""

from __future__ import annotations

import pytest

from citeline.answer.llm import LLM, LLMS
from citeline.answer.providers.local import MODELS as LOCAL_MODELS
from citeline.embed import EMBEDDERS
from citeline.errors import ConfigError
from citeline.registry import Capability, Provider, Registry, Spec
from citeline.retrieve.rerank import RERANKERS
from citeline.settings import Settings


def _letters(model: str, settings: Settings) -> str:
    return f"{model} at {settings.namespace}"


def registry() -> Registry[str]:
    things: Registry[str] = Registry("thing", reserved=("nothing",))
    things.register(Provider("letters", build=_letters, about="spells", example="letters:abc"))
    things.register(
        Provider("plain", build=lambda _m, _s: "plain", about="takes no model", example="plain", model="none")
    )
    return things


def test_a_spec_is_split_at_its_first_colon_so_models_may_hold_colons_and_slashes() -> None:
    provider, spec = registry().parse(" letters:C:/models/a:b ")
    assert (provider.name, spec) == ("letters", Spec("letters", "C:/models/a:b"))
    assert str(spec) == "letters:C:/models/a:b"
    assert registry().build("letters:x", Settings(namespace="ns")) == "x at ns"
    assert str(registry().parse("plain")[1]) == "plain"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "leters:abc",
            r"^unknown thing provider 'leters' in 'leters:abc' \(a spec is provider:model\); "
            r"known providers: letters:<model>, nothing, plain \(e\.g\. letters:abc, plain\)$",
        ),
        ("", r"^thing '' names no provider \(a spec is provider:model\); known providers: letters:<model>"),
        ("letters:", r"^thing 'letters:' names no model: write letters:<model>, e\.g\. letters:abc$"),
        ("plain:3", r"^thing provider plain takes no model, got 'plain:3': write 'plain' alone$"),
    ],
)
def test_a_spec_that_names_nothing_usable_is_a_config_error_quoting_it_and_listing_the_providers(
    spec: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        registry().parse(spec)


def test_each_kind_lists_its_built_in_providers() -> None:
    assert [p.usage for p in EMBEDDERS.providers()][:4] == [
        "ollama:<model>",
        "onnx:<model>",
        "openai:<model>",
        "sentence-transformers:<folder>",
    ]
    assert {p.name for p in LLMS.providers()} >= {"local", "openai", "anthropic"}
    assert {p.usage for p in RERANKERS.providers()} >= {"prf", "maxsim", "cross-encoder:<folder>"}


def test_a_provider_registered_under_a_built_in_name_replaces_it() -> None:
    built_in = next(p for p in LLMS.providers() if p.name == "openai")
    mine = Provider[LLM]("openai", build=built_in.build, about="a proxy of my own", example="openai:mine")
    LLMS.register(mine)
    try:
        assert LLMS.parse("openai:gpt-4o-mini")[0] is mine
    finally:
        LLMS.register(built_in)


def test_small_packaged_local_models_do_not_rewrite_follow_ups_and_others_do() -> None:
    rewriting = {
        name for name in LOCAL_MODELS if Capability.FOLLOW_UP_REWRITE in LLMS.capabilities(f"local:{name}")
    }
    assert rewriting == {"qwen2.5-coder-1.5b-instruct"}
    assert Capability.FOLLOW_UP_REWRITE in LLMS.capabilities("local:/models/mine.gguf")
    assert Capability.FOLLOW_UP_REWRITE in LLMS.capabilities("openai:gpt-4o-mini")
