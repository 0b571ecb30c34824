"""``citeline serve`` builds on uvicorn internals: the uvicorn installed has every one of them, the
dependency pin allows only the release they were tested against, and a uvicorn without one is refused
by name before anything is served."""

from __future__ import annotations

import tomllib
from importlib.metadata import version

import pytest
from packaging.requirements import Requirement
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.supervisors.multiprocess import Multiprocess

from citeline.api import protocol, supervisor
from citeline.api.uvicorn_internals import TESTED, Uses, check, check_installed, missing
from citeline.errors import ConfigError
from tests.conftest import REPO


def test_the_installed_uvicorn_has_every_internal_the_subclasses_use() -> None:
    for uses in (*protocol.UVICORN_USES, *supervisor.UVICORN_USES):
        assert missing(uses) == [], f"uvicorn {version('uvicorn')} lacks what citeline serve builds on"
    check_installed()


def test_pyproject_pins_uvicorn_to_the_tested_release_and_the_installed_one_is_in_it() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    pins = [r for r in map(Requirement, project["dependencies"]) if r.name == "uvicorn"]
    assert [str(r.specifier) for r in pins] == [str(Requirement(f"uvicorn{TESTED}").specifier)]
    # An upper bound: a release not yet tested is not installed by `make install`.
    assert not pins[0].specifier.contains("0.55.0") and not pins[0].specifier.contains("1.0")
    assert pins[0].specifier.contains(version("uvicorn"))


def test_a_renamed_hook_or_attribute_is_named_and_refused() -> None:
    # As a uvicorn that renamed on_url would be: the override would never be called, silently.
    renamed = type("HttpToolsProtocol", (HttpToolsProtocol,), {"on_url": None})
    hook = Uses(renamed, methods=("on_url", "on_body"))
    attribute = Uses(Multiprocess, methods=(), attributes={"__init__": ("should_exit", "worker_pool")})
    prop = Uses(Multiprocess, methods=(), properties=("processes",))  # a list it sets, not a property
    assert missing(hook) == ["HttpToolsProtocol.on_url"]
    assert missing(attribute) == ["Multiprocess.worker_pool (set in __init__)"]
    assert missing(prop) == ["Multiprocess.processes"]
    with pytest.raises(ConfigError) as refused:
        check([hook, attribute])
    message = str(refused.value)
    assert f"installed uvicorn {version('uvicorn')}" in message
    assert "HttpToolsProtocol.on_url, Multiprocess.worker_pool (set in __init__)" in message
    assert f"install uvicorn{TESTED}" in message
