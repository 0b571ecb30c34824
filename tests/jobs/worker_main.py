"""``citeline`` itself, with the test embedders of tests/jobs/conftest.py registered: the workers that
the Celery tests start run the real command, and can embed with a model whose gate the test holds."""

from citeline.cli import app
from tests.jobs.conftest import register_test_providers

if __name__ == "__main__":
    register_test_providers()
    app()
