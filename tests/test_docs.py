"""The user guide says what citeline does: a setting missing from docs/configuration.md, a variable it
lists that no setting reads, a default it states wrongly, or a command line in an example that
citeline would refuse (an unknown command or option) fails here."""

from __future__ import annotations

import json
import re
from enum import Enum
from typing import Any

from citeline.answer.llm import LLMS
from citeline.embed import EMBEDDERS
from citeline.errors import CitelineError
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


def _documented_settings() -> dict[str, str]:
    """Each setting's row of docs/configuration.md's tables: ``{name: documented default}``."""
    guide = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `CITELINE_([A-Z0-9_]+)` \| ([^|]*) \|", guide, re.MULTILINE)
    return {name.lower(): default.strip() for name, default in rows}


def test_every_documented_variable_is_a_setting() -> None:
    # A variable the guide lists but no setting reads is ignored without a word (configuration.md):
    # an operator setting it would wait for an effect that never comes.
    unknown = [name for name in _documented_settings() if name not in Settings.model_fields]
    assert not unknown, f"docs/configuration.md documents no setting by these names: {unknown}"


def _written(value: Any) -> str:
    """A default as the guide writes it: `unset`, `true`, `800`, `0.02`, `dbsf`, `[]`."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, Enum):
        return f"`{value.value}`"
    if isinstance(value, list | dict):
        return f"`{json.dumps(value)}`"
    return f"`{value}`"


def test_every_documented_default_is_the_settings_default() -> None:
    wrong = {}
    for name, documented in _documented_settings().items():
        field = Settings.model_fields.get(name)
        if field is None or documented == "see below":  # the source boost table, checked below
            continue
        default = field.get_default(call_default_factory=True)
        if isinstance(default, float) and not isinstance(default, bool):
            # 60 and 60.0 are the same default: compare the numbers.
            matches = (
                documented.strip("`").replace(".", "", 1).isdigit()
                and float(documented.strip("`")) == default
            )
        else:
            matches = documented == _written(default)
        if not matches:
            wrong[f"CITELINE_{name.upper()}"] = (documented, _written(default))
    assert not wrong, f"docs/configuration.md's defaults differ from Settings (documented, real): {wrong}"


def test_the_documented_source_boost_is_the_default() -> None:
    guide = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    shown = re.search(r"The default `CITELINE_SOURCE_BOOST` is:\n\n```json\n(.*)\n```", guide)
    assert shown is not None, "docs/configuration.md no longer shows the default CITELINE_SOURCE_BOOST"
    assert json.loads(shown.group(1)) == Settings.model_fields["source_boost"].get_default(
        call_default_factory=True
    )


#: The pages whose shell examples must run as written: the README and the whole user guide.
PAGES = ("README.md", *sorted(f"docs/{page.name}" for page in (REPO / "docs").glob("*.md")))


def _shell_commands(text: str) -> list[str]:
    """The ``citeline`` command lines of ``text``'s code blocks (continuation lines joined; comments,
    a leading ``$ ``, ``.venv/bin/``, environment assignments and what a pipe feeds dropped)."""
    commands, fence, lines = [], None, text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            fence = line[3:] if fence is None else None
        elif fence is not None and fence not in ("python", "json"):
            line = re.sub(r"^\$ ", "", line)
            while line.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line.rstrip()[:-1] + " " + lines[i].strip()
            for part in line.split(" | ")[0].split("&&"):
                part = re.sub(r"^(export )?([A-Z_]+=\S+ )*", "", part.strip()).replace(".venv/bin/", "")
                if part.startswith("citeline "):
                    commands.append(part.split("  #")[0].split(" # ")[0].strip())
        i += 1
    return commands


def test_every_command_line_in_the_guide_is_one_citeline_takes() -> None:
    # A renamed option or command left in an example is the first thing a new team trips over. (typer
    # carries a click of its own: its commands are told apart by what they hold, not by click's classes.)
    import shlex

    import typer.main

    from citeline.cli import app

    root = typer.main.get_command(app)
    wrong = []
    for page in PAGES:
        for line in _shell_commands((REPO / page).read_text(encoding="utf-8")):
            command: Any = root
            params = {o: p for p in root.params for o in (*p.opts, *p.secondary_opts)}
            words = iter(shlex.split(line)[1:])
            for word in words:
                if word.startswith("-"):
                    param = params.get(word.split("=")[0])
                    if param is None:
                        wrong.append(f"{page}: {line}: {command.name} takes no option {word}")
                    elif (
                        param.param_type_name == "option"
                        and not getattr(param, "is_flag", False)
                        and "=" not in word
                    ):
                        next(words, None)  # its value
                elif hasattr(command, "commands"):
                    if word not in command.commands:
                        wrong.append(f"{page}: {line}: no command {word}")
                        break
                    command = command.commands[word]
                    params |= {o: p for p in command.params for o in (*p.opts, *p.secondary_opts)}
            if hasattr(command, "commands"):
                wrong.append(f"{page}: {line}: names no command")
    assert not wrong, "\n".join(wrong)


def _errors() -> dict[str, type[CitelineError]]:
    """Every class of citeline's error hierarchy, by name."""
    import citeline.errors as errors

    return {
        name: error
        for name, error in vars(errors).items()
        if isinstance(error, type) and issubclass(error, CitelineError)
    }


def _statuses() -> dict[str, set[int]]:
    """Each error class's HTTP statuses: its own, and those a raise site gives it (``http_status=414``)."""
    import ast

    statuses = {name: {error.http_status} for name, error in _errors().items()}
    for source in (REPO / "src" / "citeline").rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in statuses:
                for keyword in node.keywords:
                    if keyword.arg != "http_status":
                        continue
                    status = keyword.value.value if isinstance(keyword.value, ast.Constant) else None
                    # A status computed at the raise site could be any: the tables could not be checked.
                    assert isinstance(status, int), f"{source}:{node.lineno}: http_status is not a number"
                    statuses[node.func.id].add(status)
    return statuses


def test_every_error_is_in_the_troubleshooting_table_with_its_exit_code_and_status() -> None:
    # The table is what an operator reads an exit code or an HTTP status against.
    guide = (REPO / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    rows = {
        name: (code, statuses)
        for name, code, statuses in re.findall(
            r"^\| `(\w+Error)` \| (\d+) \| ([\d, ]+) \|", guide, re.MULTILINE
        )
    }
    statuses, wrong = _statuses(), []
    for name, error in _errors().items():
        if name not in rows:
            wrong.append(f"{name} is not in the table")
            continue
        code, documented = rows[name]
        if int(code) != error.exit_code:
            wrong.append(f"{name}: documented exit code {code}, is {error.exit_code}")
        missing = statuses[name] - {int(status) for status in documented.split(", ")}
        if missing:
            wrong.append(f"{name}: documented HTTP status {documented}, answers {sorted(missing)} too")
    assert not wrong, wrong


def test_every_error_code_is_in_the_api_error_table_with_its_status() -> None:
    # A client tells errors apart by `error.code` (api.md): one missing from the table, or listed under
    # another status, is a response a client author was never told to expect.
    from citeline.api.errors import error_code

    guide = (REPO / "docs" / "api.md").read_text(encoding="utf-8")
    table = re.findall(r"^\| (\d{3}) \| ([^|]*) \|", guide, re.MULTILINE)
    listed = {(int(status), code) for status, codes in table for code in re.findall(r"`(\w+)`", codes)}
    wrong = []
    for name, statuses in _statuses().items():
        error = _errors()[name]
        code = error_code(error.__new__(error))  # the code is the class's: no message is needed
        wrong += [f"{name}: {status} `{code}`" for status in sorted(statuses) if (status, code) not in listed]
    assert not wrong, f"docs/api.md's error table lacks these statuses and codes: {wrong}"


def _documented_meanings() -> dict[str, str]:
    """Each setting's row of docs/configuration.md's tables: ``{name: what its Meaning column says}``."""
    guide = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `CITELINE_([A-Z0-9_]+)` \| [^|]* \| (.*) \|$", guide, re.MULTILINE)
    return {name.lower(): meaning for name, meaning in rows}


def _number(value: float) -> str:
    """A bound as the guide may write it: ``1024``, ``3,600`` or ``100,000`` (commas optional)."""
    text = f"{value:g}" if isinstance(value, float) else str(value)
    plain, grouped = re.escape(text), re.escape(f"{value:,g}" if isinstance(value, float) else f"{value:,}")
    return f"(?:{plain}|{grouped})"


def _bounds(name: str) -> dict[str, float]:
    """The numeric bounds of setting ``name`` (``ge``, ``gt``, ``le``), as its Field declares them."""
    found: dict[str, float] = {}
    for constraint in Settings.model_fields[name].metadata:
        for kind in ("ge", "gt", "le"):
            if getattr(constraint, kind, None) is not None:
                found[kind] = getattr(constraint, kind)
    return found


def test_every_documented_range_is_the_settings_range() -> None:
    # Bounds are enforced when the settings are read (exit 78): a range the guide states wrongly sends an
    # operator to a value citeline refuses, or hides one it takes.
    wrong = {}
    for name, meaning in _documented_meanings().items():
        if name not in Settings.model_fields:
            continue
        bounds = _bounds(name)
        if "ge" in bounds:
            least, low = f"at least {_number(bounds['ge'])}", f"(?:from )?{_number(bounds['ge'])}"
        elif "gt" in bounds:
            least = low = f"above {_number(bounds['gt'])}"
        else:
            continue
        if "le" in bounds:  # "1 to 1024", "from 0 to 1", "above 0, at most 300", "above 0 and up to 3,600"
            pattern = rf"\b{low}(?: to|, at most| and up to) {_number(bounds['le'])}\b"
        else:  # "at least 0", "above 0"
            pattern = rf"\b{least}\b"
        if not re.search(pattern, meaning, re.IGNORECASE):
            wrong[f"CITELINE_{name.upper()}"] = bounds
    assert not wrong, f"docs/configuration.md does not state these settings' ranges (Field bounds): {wrong}"


def test_every_choice_of_a_setting_is_documented() -> None:
    # A Literal or enum setting takes only its listed values; the guide should name each of them.
    from typing import Literal, get_args, get_origin

    wrong = {}
    for name, meaning in _documented_meanings().items():
        field = Settings.model_fields.get(name)
        if field is None:
            continue
        kind = field.annotation
        if get_origin(kind) is Literal:
            choices = [str(choice) for choice in get_args(kind)]
        elif isinstance(kind, type) and issubclass(kind, Enum):
            choices = [str(member.value) for member in kind]
        else:
            continue
        missing = [choice for choice in choices if f"`{choice}`" not in meaning]
        if missing:
            wrong[f"CITELINE_{name.upper()}"] = missing
    assert not wrong, f"docs/configuration.md's rows do not name these values the settings take: {wrong}"
