"""The user guide documents every setting: a setting missing from docs/configuration.md fails here."""

from __future__ import annotations

from citeline.answer.llm import LLMS
from citeline.embed import EMBEDDERS
from citeline.retrieve.rerank import RERANKERS
from citeline.settings import Settings
from tests.conftest import REPO


def test_every_setting_is_documented() -> None:
    guide = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    missing = [name for name in Settings.model_fields if f"`CITELINE_{name.upper()}`" not in guide]
    assert not missing, f"settings missing from docs/configuration.md: {missing}"


def test_every_built_in_provider_is_documented() -> None:
    guide = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    written = {
        p.usage: f"`{p.name}`" if p.model == "none" else f"`{p.name}:"
        for registry in (EMBEDDERS, LLMS, RERANKERS)
        for p in registry.providers()
    }
    missing = [usage for usage, text in written.items() if text not in guide]
    assert not missing, f"providers missing from docs/configuration.md: {missing}"
