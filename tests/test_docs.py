"""The user guide documents every setting: a setting missing from docs/configuration.md fails here."""

from __future__ import annotations

from citeline.settings import Settings
from tests.conftest import REPO


def test_every_setting_is_documented() -> None:
    guide = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    missing = [name for name in Settings.model_fields if f"`CITELINE_{name.upper()}`" not in guide]
    assert not missing, f"settings missing from docs/configuration.md: {missing}"
