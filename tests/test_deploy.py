"""compose.yaml and the Dockerfile describe a deployment citeline can run: every CITELINE_ variable is a
setting, every command is a citeline command with options it has, and the image carries the assets the
package serves. (No container runtime here; tests/jobs/test_topology.py runs the same topology.)"""

from __future__ import annotations

import re
from typing import Any

import yaml
from typer.main import get_command

from citeline.cli import app
from citeline.settings import Settings
from tests.conftest import REPO

COMPOSE: dict[str, Any] = yaml.safe_load((REPO / "compose.yaml").read_text(encoding="utf-8"))
CITELINE_SERVICES = ("api", "worker")


def test_every_citeline_variable_in_compose_is_a_setting() -> None:
    for name in CITELINE_SERVICES:
        env = COMPOSE["services"][name]["environment"]
        unknown = [
            key
            for key in env
            if key.startswith("CITELINE_")
            and key.removeprefix("CITELINE_").lower() not in Settings.model_fields
        ]
        assert unknown == [], f"{name}: {unknown}"
        assert env["CITELINE_JOB_RUNNER"] == "celery" and env["CITELINE_REDIS_URL"].startswith("redis://")
        assert env["CITELINE_DATABASE_URL"].startswith("postgresql://")


def test_services_run_citeline_commands_with_options_they_have() -> None:
    cli = get_command(app)
    for name in CITELINE_SERVICES:
        program, command, *args = COMPOSE["services"][name]["command"]
        assert program == "citeline"
        sub = cli.commands[command]  # type: ignore[attr-defined]
        options = {opt for param in sub.params for opt in param.opts}
        assert {a for a in args if a.startswith("--")} <= options, (name, args)
    # API replicas and workers share the stored originals, as the job runner needs.
    assert COMPOSE["services"]["api"]["volumes"] == COMPOSE["services"]["worker"]["volumes"]


def test_workers_are_given_the_time_to_finish_a_build_when_stopped() -> None:
    # SIGTERM lets a worker finish its builds, up to the hard time limit; Docker's default of 10 s
    # would kill them half built.
    grace = COMPOSE["services"]["worker"].get("stop_grace_period", "10s")
    seconds = int(grace[:-1]) * {"s": 1, "m": 60, "h": 3600}[grace[-1]]
    assert seconds > Settings.model_fields["job_hard_time_limit"].default


def test_the_image_carries_the_pdf_viewer_the_package_serves() -> None:
    dockerfile = (REPO / "Dockerfile").read_text(encoding="utf-8")
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    copied_by_make = set(re.findall(r"pdfjs-dist/(\S+)", makefile))
    assert copied_by_make and copied_by_make <= set(re.findall(r"pdfjs-dist/(\S+)", dockerfile))
