# The citeline image of compose.yaml: the API (`citeline serve`) and the workers (`citeline worker`)
# run from it. PDF.js and Swagger UI come from npm in a build stage, as `make web` does on a development
# machine.
FROM node:20-bookworm-slim AS web
WORKDIR /build/web
COPY web/package.json web/package-lock.json ./
RUN npm ci --omit=optional --ignore-scripts --no-audit --no-fund

FROM python:3.11-slim-bookworm
# tesseract-ocr reads scanned PDFs; nothing else comes from apt.
RUN apt-get update \
    && apt-get install -y --no-install-recommends tesseract-ocr tesseract-ocr-eng tesseract-ocr-osd \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
COPY --from=web /build/web/node_modules/pdfjs-dist/build/pdf.min.mjs \
    /build/web/node_modules/pdfjs-dist/build/pdf.worker.min.mjs \
    /build/web/node_modules/pdfjs-dist/LICENSE \
    ./src/citeline/web/static/vendor/pdfjs/
COPY --from=web /build/web/node_modules/pdfjs-dist/wasm ./src/citeline/web/static/vendor/pdfjs/wasm/
COPY --from=web /build/web/node_modules/swagger-ui-dist/swagger-ui-bundle.js \
    /build/web/node_modules/swagger-ui-dist/swagger-ui.css \
    /build/web/node_modules/swagger-ui-dist/LICENSE \
    ./src/citeline/web/static/vendor/swagger-ui/
# EXTRAS=[chroma] adds the Chroma client (compose.yaml's chroma profile sets it).
ARG EXTRAS=""
RUN pip install --no-cache-dir ".${EXTRAS}" && useradd --create-home citeline && mkdir /data && chown citeline /data
USER citeline
ENV CITELINE_DATA_DIR=/data
EXPOSE 8000
CMD ["citeline", "serve", "--host", "0.0.0.0", "--port", "8000"]
