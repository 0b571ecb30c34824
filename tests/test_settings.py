"""Settings are checked when they are read: a bad value stops the command that reads it, naming the
variable, on one line, with the configuration exit code, never a request blamed for it later."""

from __future__ import annotations

from collections.abc import Callable
from typing import get_args

import pytest
from typer.testing import CliRunner

from citeline.answer.prompt import PERSONAS
from citeline.cli import app
from citeline.errors import ConfigError
from citeline.settings import Persona, Settings, load_settings


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("CITELINE_TOP_K", "0", "CITELINE_TOP_K: Input should be greater than or equal to 1 (got '0')"),
        ("CITELINE_PERSONA", "bogus", "CITELINE_PERSONA: Input should be 'general', 'clinical' or 'repair'"),
        (
            "CITELINE_SOURCE_BOOST",
            '{"text/plain": 5}',
            "CITELINE_SOURCE_BOOST.text/plain: Input should be less than or equal to 1 (got '5')",
        ),
        # A port that is not a number failed every command with a traceback from SQLAlchemy; the
        # password is never shown.
        (
            "CITELINE_DATABASE_URL",
            "postgresql://team:s3cret@db.internal:notaport/kb",
            "CITELINE_DATABASE_URL: Value error, database_url is not a valid URL (invalid literal for int() "
            "with base 10: 'notaport') (got 'postgresql://team:***@db.internal:notaport/kb')",
        ),
        # A list or a mapping not written as JSON ended every command in pydantic-settings' traceback.
        (
            "CITELINE_KEYWORD_EXTRA_STOP_WORDS",
            "patient, study",
            "CITELINE_KEYWORD_EXTRA_STOP_WORDS: not JSON; a list or a mapping is written as JSON, e.g. "
            '["patient", "study"] or {"application/pdf": 1.0} (got \'patient, study\')',
        ),
        ("CITELINE_SOURCE_BOOST", "pdf:1", "CITELINE_SOURCE_BOOST: not JSON;"),
        (
            "CITELINE_LABEL_BOOST",
            '{"tag:trusted": 2}',
            "CITELINE_LABEL_BOOST.tag:trusted: Input should be less than or equal to 1 (got '2')",
        ),
        # A selector without its kind would boost nothing, silently.
        (
            "CITELINE_LABEL_BOOST",
            '{"trusted": 1}',
            "CITELINE_LABEL_BOOST: Value error, label_boost key 'trusted' must be tag:<tag>, "
            "category:<category> or scope:<scope>",
        ),
        (
            "CITELINE_LABEL_BOOST",
            '{"category: / ": 0.5}',
            "CITELINE_LABEL_BOOST: Value error, label_boost key 'category: / ' names no category",
        ),
        (
            "CITELINE_LABEL_BOOST",
            '{"tag:": 0.5}',
            "CITELINE_LABEL_BOOST: Value error, label_boost key 'tag:' names no tag",
        ),
        # Refused at the first ingest as a bad --chunk-overlap (exit 2), though no option was given.
        (
            "CITELINE_CHUNK_OVERLAP",
            "900",
            "CITELINE_CHUNK_OVERLAP: Value error, chunk_overlap must be below the chunk size "
            "(CITELINE_CHUNK_SIZE, 800) (got '900')",
        ),
        (
            "CITELINE_REDIS_URL",
            "http://team:s3cret@broker",
            "CITELINE_REDIS_URL: Value error, redis_url must be a redis://, rediss:// or unix:// URL "
            "(got 'http://team:***@broker')",
        ),
    ],
)
def test_a_bad_setting_is_a_configuration_error_naming_its_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert message in str(caught.value) and "\n" not in str(caught.value)

    result = CliRunner().invoke(app, ["stats"], env={variable: value})
    assert result.exit_code == 78
    assert result.stderr.strip().count("\n") == 0  # one line, never pydantic's several and its URL
    assert result.stderr.startswith("error: invalid setting: ") and message in " ".join(result.stderr.split())


def test_every_persona_a_setting_may_name_has_a_prompt_and_every_prompt_a_name() -> None:
    assert set(get_args(Persona)) == set(PERSONAS)


def test_settings_built_in_python_refuse_a_bad_value_as_a_configuration_error() -> None:
    # Settings(...) raised pydantic's ValidationError, outside citeline's errors; the docs build it so.
    with pytest.raises(
        ConfigError, match=r"^invalid setting: CITELINE_NAMESPACE: Value error, namespace 'Bad Name'"
    ):
        Settings(namespace="Bad Name")
    with pytest.raises(
        ConfigError, match=r"^invalid setting: CITELINE_TOP_K: Input should be a valid integer"
    ):
        Settings(top_k="ten")


@pytest.mark.parametrize("build", [Settings, load_settings])
def test_an_unknown_keyword_is_refused_with_the_closest_setting(build: Callable[..., Settings]) -> None:
    # top_kk=3 was ignored: the search ran with the default top_k and nothing said why.
    with pytest.raises(ConfigError, match=r"^unknown setting 'top_kk' \(did you mean 'top_k'\?\)"):
        build(top_kk=3)


def test_an_unknown_citeline_variable_in_the_environment_is_still_ignored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Only keywords are refused: a variable may belong to another version of citeline on the machine.
    monkeypatch.setenv("CITELINE_TOP_KK", "3")
    assert Settings().top_k == load_settings().top_k
