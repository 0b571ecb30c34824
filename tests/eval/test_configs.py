"""Named configurations: settings overrides validated by Settings, refused with the valid names listed."""

from __future__ import annotations

import pytest

from citeline.errors import InvalidRequestError
from citeline.eval.configs import CONFIGS, available_configs, missing_settings, parse_configs
from citeline.settings import Fusion, Settings

BASE = Settings(namespace="eval_x", weight_semantic=0.6, weight_keyword=0.2, weight_source=0.2)


def test_builtin_names_become_settings() -> None:
    rrf, dense, keyword = parse_configs("rrf, dense,keyword", BASE)
    assert [c.name for c in (rrf, dense, keyword)] == ["rrf", "dense", "keyword"]
    assert rrf.settings.fusion is Fusion.RECIPROCAL_RANK
    assert (dense.settings.weight_keyword, dense.settings.weight_source) == (0.0, 0.0)
    assert dense.settings.weight_semantic > 0 and dense.settings.fusion is Fusion.WEIGHTED
    assert (keyword.settings.weight_semantic, keyword.settings.weight_source) == (0.0, 0.0)
    assert keyword.settings.weight_keyword > 0
    # Everything not overridden is the base's, and the base is left alone.
    assert rrf.settings.namespace == "eval_x" and rrf.settings.weight_keyword == 0.2
    assert BASE.fusion is Fusion.DISTRIBUTION
    assert rrf.describe() == {"fusion": "rrf"}


def test_default_is_the_current_settings() -> None:
    (default,) = parse_configs("default", BASE)
    assert default.settings == BASE and default.describe() == {}


def test_every_builtin_either_validates_or_names_the_setting_it_waits_for() -> None:
    assert {"default", "rrf", "weighted", "dense", "keyword"} <= set(available_configs())
    for name, overrides in CONFIGS.items():
        missing = missing_settings(overrides)
        if not missing:
            assert parse_configs(name, BASE)[0].settings is not None
            continue
        with pytest.raises(InvalidRequestError) as info:
            parse_configs(name, BASE)
        assert all(key in str(info.value) for key in missing)
        assert "valid configurations: default, rrf, weighted, dense, keyword" in str(info.value)


def test_a_configuration_may_name_another_vector_backend() -> None:
    """It is evaluated on a store of its own (see tests/eval/test_compare.py)."""
    (chroma,) = parse_configs("chroma=vector_backend:chroma", BASE)
    assert chroma.settings.vector_backend == "chroma" and chroma.describe() == {"vector_backend": "chroma"}


def test_a_built_in_name_may_be_spelled_out_with_its_own_settings_only() -> None:
    (doc,) = parse_configs("doc=weight_keyword:0;weight_document:0.2", BASE)
    assert doc.settings == parse_configs("doc", BASE)[0].settings


def test_ad_hoc_configuration_is_parsed_and_validated() -> None:
    (wide,) = parse_configs("sharp=fusion:rrf;rrf_k:5", BASE)
    assert wide.name == "sharp" and wide.settings.fusion is Fusion.RECIPROCAL_RANK
    assert wide.settings.rrf_k == 5
    assert wide.describe() == {"fusion": "rrf", "rrf_k": 5}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("bm42", ["unknown configuration 'bm42'", "valid configurations: default, rrf"]),
        # The settings, not the configuration names, and the closest one.
        (
            "x=no_such_setting:1",
            ["'no_such_setting'", "is not a setting", "settings a configuration may set: "],
        ),
        (
            "x=weight_keywords:0.3",
            ["'weight_keywords', which is not a setting", "did you mean 'weight_keyword'? Settings"],
        ),
        ("big=chunk_size:2000", ["chunk_size", "same stored corpus", "--namespace"]),
        ("ns=namespace:other", ["namespace", "same stored corpus"]),
        ("sql=keyword_index:sql", ["keyword_index", "same stored corpus"]),
        ("one=embed_threads:1", ["embed_threads", "same stored corpus"]),
        ("far=chroma_url:http://127.0.0.1:1", ["chroma_url", "same stored corpus"]),
        ("neg=weight_keyword:-1", ["configuration 'neg' is invalid", "weight_keyword"]),
        ("odd=fusion:sum", ["configuration 'odd' is invalid", "fusion"]),
        ("broken=fusion", ["'fusion' is not key:value"]),
        ("rrf,rrf", ["'rrf' is named twice"]),
        # A built-in name used to be redefined silently: "rrf" here would have been weighted fusion.
        ("default,rrf=fusion:weighted", ["'rrf' is a built-in configuration", "pick another name"]),
        # The last value used to win silently.
        (
            "default,x=fusion:rrf;fusion:dbsf",
            ["configuration 'x' sets 'fusion' twice", "give each setting once"],
        ),
        ("=fusion:rrf", ["has no name"]),
        (" , ", ["names no configuration"]),
    ],
)
def test_bad_configurations_are_refused_with_the_reason(spec: str, expected: list[str]) -> None:
    with pytest.raises(InvalidRequestError) as info:
        parse_configs(spec, BASE)
    for part in expected:
        assert part in str(info.value)
