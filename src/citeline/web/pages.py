"""The web pages on the API app: the chat page at ``/``, the admin page at ``/admin``, the API's
description at ``/docs`` and the static folder (pages, viewer, PDF.js, Swagger UI) at ``/static``.

The pages are static files and load without a key; every API call they make sends the key the user
signed in with. They are served with a Content-Security-Policy that allows scripts from this server
only, so a document that smuggles markup into a page could not run anything even if it were ever
interpreted (the pages always insert document text as text).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles
from starlette.responses import Response
from starlette.types import Scope

from citeline.web import static_dir

__all__ = ["mount_pages"]

# ES modules must come with a JavaScript type or the browser refuses them; the platform's mimetypes
# table does not always know .mjs (PDF.js's files), so the types of the files served are fixed here.
_TYPES = {
    ".mjs": "text/javascript; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".html": "text/html; charset=utf-8",
}

# PDF.js runs its worker from a module URL of this server and sets styles through the CSSOM only, but
# its text layer and the pages' viewer set style attributes, hence 'unsafe-inline' for styles alone.
# Its image decoders (JBIG2, CCITT fax, JPEG 2000) are WebAssembly from this server's static folder,
# which a browser compiles only under 'wasm-unsafe-eval' (it allows no JavaScript eval); without it PDF.js
# falls back to their slower JavaScript builds.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; worker-src 'self' blob:; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; font-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)
_PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # A page is small and changes with each release: the browser revalidates it (ETag) every time.
    "Cache-Control": "no-cache",
}


class _StaticFiles(StaticFiles):
    """Static files with the JavaScript, CSS and HTML types fixed and the pages' security headers."""

    def file_response(
        self, full_path: Any, stat_result: Any, scope: Scope, status_code: int = 200
    ) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        kind = _TYPES.get(Path(str(full_path)).suffix)
        if kind:
            response.headers["content-type"] = kind
        response.headers.update(_PAGE_HEADERS)
        return response


def _page(name: str) -> FileResponse:
    return FileResponse(static_dir() / name, media_type=_TYPES[".html"], headers=_PAGE_HEADERS)


def mount_pages(app: FastAPI) -> None:
    """Serve the chat page at ``/``, the admin page at ``/admin``, Swagger UI at ``/docs`` and ``static/``
    at ``/static``."""

    @app.get("/", include_in_schema=False)
    async def chat_page() -> FileResponse:
        return _page("chat.html")

    @app.get("/admin", include_in_schema=False)
    async def admin_page() -> FileResponse:
        return _page("admin.html")

    @app.get("/docs", include_in_schema=False)
    async def api_description() -> HTMLResponse:
        # FastAPI's Swagger UI page, its script and style served from here (make web copies them from
        # npm's swagger-ui-dist), as every page's are: nothing is loaded from a CDN.
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} API",
            swagger_js_url="/static/vendor/swagger-ui/swagger-ui-bundle.js",
            swagger_css_url="/static/vendor/swagger-ui/swagger-ui.css",
            swagger_favicon_url="data:,",
        )

    app.mount("/static", _StaticFiles(directory=static_dir()), name="static")
