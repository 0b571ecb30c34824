"""``citeline`` itself, its vector index an :class:`~tests.jobs.conftest.UnreachableStore` whose outage
lasts while the file ``$CITELINE_TEST_OUTAGE`` exists: a real server whose vector store a test stops and
starts again."""

import os
from pathlib import Path

import pytest

import citeline.engine
from citeline.cli import app
from tests.jobs.conftest import UnreachableStore

if __name__ == "__main__":
    outage = Path(os.environ["CITELINE_TEST_OUTAGE"])
    # As the in-process tests patch it (tests/jobs/test_jobs.py, the outage fixture).
    pytest.MonkeyPatch().setattr(citeline.engine, "open_index", lambda s: UnreachableStore(outage, s))
    app()
