"""The package's front door: ``from citeline import Citeline, SearchRequest, ...`` gives a program
everything it embeds citeline with, typed for mypy --strict, and ``import citeline`` stays as light as
it was (a CLI's ``--help`` and a program that only reads ``citeline.__version__`` load no model runtime
and no database driver)."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import citeline
from tests.conftest import REPO

#: What a program embedding citeline reaches for, and the module each one lives in.
PUBLIC = {
    "Citeline": "citeline.engine",
    "Settings": "citeline.settings",
    "load_settings": "citeline.settings",
    "SearchRequest": "citeline.retrieve.search",
    "Hit": "citeline.retrieve.search",
    "Filters": "citeline.retrieve.filters",
    "IngestOptions": "citeline.ingest",
    "IngestResult": "citeline.ingest",
    "Outcome": "citeline.ingest",
    "Access": "citeline.access",
    "DocumentInfo": "citeline.store.catalog",
    "ChatSession": "citeline.chat.session",
    "TurnStart": "citeline.chat.events",
    "Token": "citeline.answer.events",
    "CitationEvent": "citeline.answer.events",
    "Complete": "citeline.answer.events",
    "Citation": "citeline.answer.citations",
    "CitelineError": "citeline.errors",
    "NotFoundError": "citeline.errors",
    "AccessDeniedError": "citeline.errors",
}


def test_importing_citeline_loads_no_runtime_and_no_database_driver() -> None:
    # In a fresh interpreter: this test process has long imported all of them.
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, citeline; print(' '.join(sorted(m for m in "
            "('onnxruntime', 'sqlalchemy', 'numpy', 'pydantic', 'citeline.engine') if m in sys.modules)))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert loaded == "", f"import citeline loaded {loaded}"


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_each_public_name_is_the_class_of_its_own_module(name: str) -> None:
    assert name in citeline.__all__
    assert getattr(citeline, name) is getattr(importlib.import_module(PUBLIC[name]), name)


def test_every_name_in_all_resolves_and_shows_in_dir() -> None:
    for name in citeline.__all__:
        assert getattr(citeline, name) is not None, name
    assert set(citeline.__all__) <= set(dir(citeline))
    # __all__ is what mypy and `import *` read, the module table what runs: one may not lose a name.
    assert set(citeline.__all__) == {"__version__", *citeline._MODULES}


def test_every_error_of_the_hierarchy_is_public() -> None:
    # A program catches what the library raises by the names the top level gives it.
    import citeline.errors as errors

    hierarchy = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, errors.CitelineError)
    }
    missing = sorted(hierarchy - set(citeline.__all__))
    assert not missing, (
        f"errors missing from `from citeline import ...`: {missing}; add each to src/citeline/__init__.py "
        "(its TYPE_CHECKING import, _MODULES and __all__) and to docs/python.md's table of errors"
    )


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="module 'citeline' has no attribute 'Citelin'"):
        citeline.Citelin  # type: ignore[attr-defined]  # noqa: B018 - the lookup is the test


def test_a_program_importing_the_public_names_passes_mypy_strict(tmp_path: Path) -> None:
    from mypy import api

    program = tmp_path / "program.py"
    program.write_text(
        textwrap.dedent(
            """
            from citeline import (
                Access, ChatSession, Citeline, CitelineError, Complete, Filters, Hit, IngestOptions,
                SearchRequest, Settings, Token, load_settings,
            )

            def search(cl: Citeline, query: str) -> list[Hit]:
                request = SearchRequest(query, filters=Filters(scopes=("a",)))
                return cl.search(request, access=Access.reader(["a"]))

            def answer_text(event: Token | Complete) -> str:
                return event.text if isinstance(event, Token) else event.answer

            def session(settings: Settings) -> ChatSession:
                with Citeline(settings) as cl:
                    cl.ingest(["docs"], IngestOptions(tags=("x",)))
                    return cl.chat()

            def settings() -> Settings:
                try:
                    return load_settings(llm="extractive")
                except CitelineError as exc:
                    raise SystemExit(str(exc)) from exc
            """
        )
    )
    typo = tmp_path / "typo.py"
    typo.write_text("from citeline import Citelin\n")
    # The project's configuration and cache (`make test` runs mypy first): citeline's modules are
    # read from the cache, so only the two files are checked (a second, not a cold run's 20).
    common = ["--config-file", str(REPO / "pyproject.toml"), "--cache-dir", str(REPO / ".mypy_cache")]
    out, err, status = api.run([*common, str(program)])
    assert status == 0, out + err
    # A misspelt name is mypy's error, not an Any that hides it.
    out, _, status = api.run([*common, str(typo)])
    assert status == 1 and 'Module "citeline" has no attribute "Citelin"' in out, out
