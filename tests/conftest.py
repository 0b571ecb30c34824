"""Shared fixtures: one real embedded PostgreSQL for the session, a fresh namespace (schema) per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from citeline.engine import Citeline
from citeline.settings import Settings
from citeline.store.database import schema_name

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
PDFS = SHARED / "fixtures" / "pdfs"


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("citeline-data")


@pytest.fixture
def settings(data_dir: Path) -> Settings:
    return Settings(data_dir=data_dir, namespace=f"t_{uuid.uuid4().hex[:12]}", database_url=None)


@pytest.fixture
def cl(settings: Settings) -> Iterator[Citeline]:
    with Citeline(settings) as instance:
        yield instance
        with instance.engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema_name(settings.namespace)}" CASCADE'))


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
