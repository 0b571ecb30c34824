"""``citeline`` itself, with the test embedders of tests/jobs/conftest.py registered: the workers that
the Celery tests start run the real command, and can embed with a model whose gate the test holds."""

import tests.jobs.conftest  # noqa: F401  (registers the faulty, gated and filegate embedders)
from citeline.cli import app

if __name__ == "__main__":
    app()
