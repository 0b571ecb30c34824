# citeline: every set-up step lives here, so a fresh machine needs only Python 3.11 and pip.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
export CITELINE_DATA_DIR ?= $(CURDIR)/citeline-data

.PHONY: install demo test lint typecheck bench eval clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[dev]"
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

## demo: ingest the user guide (docs/), search it, and answer a question with the local model.
demo: install
	$(BIN)/citeline ingest docs/ --category citeline/guide
	$(BIN)/citeline search "how do I keep documents of one care journey apart from another?" --top-k 3
	$(BIN)/citeline ask "how do I keep documents of one care journey apart from another?"

## test: lint, type-check and run the whole suite against real PostgreSQL and the real model.
test: install lint typecheck
	$(BIN)/pytest -q

lint: install
	$(BIN)/ruff check src tests bench

typecheck: install
	$(BIN)/mypy

## bench: embedder, ingest and search figures (see bench/README.md).
bench: install
	$(BIN)/python -m bench.run

## eval: retrieval quality on SciFact (../shared/eval/scifact).
eval: install
	$(BIN)/citeline eval ../shared/eval/scifact

clean:
	rm -rf $(VENV) citeline-data .pytest_cache .mypy_cache .ruff_cache
