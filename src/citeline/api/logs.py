"""``citeline serve``'s log lines: text as uvicorn writes them, or one JSON object a line
(``CITELINE_LOG_FORMAT=json``), and access lines that keep no query values unless told to
(``CITELINE_LOG_QUERY_VALUES``): ``GET /search?q=`` carries the question asked, which may name a
patient or a customer, and access logs are kept longer and read more widely than answers."""

from __future__ import annotations

import copy
import json
import logging
import time
from datetime import UTC, datetime
from typing import Any

from citeline.api.request_id import RequestIdLogFilter, current_request, key_id, route_template
from citeline.settings import Settings

#: What stands for a query value left out of the log.
HIDDEN = "…"
#: The fields an access line adds to a JSON line.
ACCESS_FIELDS = ("client", "method", "path", "route", "status", "duration_ms", "key_id")


def without_query_values(path: str) -> str:
    """``path`` with each query value replaced by :data:`HIDDEN` (``/search?q=…&n=…``); names stay, so
    the line still says which parameters were sent."""
    base, mark, query = path.partition("?")
    if not mark:
        return path
    parts = (
        name + ("=" + HIDDEN if sep else "") for name, sep, _ in (p.partition("=") for p in query.split("&"))
    )
    return f"{base}?{'&'.join(parts)}"


class AccessLogFilter(logging.Filter):
    """On uvicorn's access lines (``'%s - "%s %s HTTP/%s" %d'``, client, method, path, version and
    status): the path's query values hidden unless ``keep_query_values``, and the request's fields as
    the record's attributes for :class:`JsonFormatter`: method, path, route template, status, the
    milliseconds from the request's arrival to its response's start, and the key's id."""

    def __init__(self, keep_query_values: bool = False) -> None:
        super().__init__()
        self.keep_query_values = keep_query_values

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5:
            client, method, path, version, status = args
            if not self.keep_query_values:
                path = without_query_values(str(path))
            record.args = (client, method, path, version, status)
            record.client, record.method, record.path, record.status = client, method, path, status
        served = current_request()
        if served is not None:
            record.route = route_template(served.scope)
            record.duration_ms = round((time.perf_counter() - served.started) * 1e3, 3)
            record.key_id = key_id(served.scope)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time (UTC, ISO 8601), level, logger, message, request_id, an access
    line's fields (:data:`ACCESS_FIELDS`) and a traceback as ``exception``."""

    def format(self, record: logging.LogRecord) -> str:
        request_id = getattr(record, "request_id", None)
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": None if request_id in (None, "-") else request_id,
        }
        for name in ACCESS_FIELDS:
            if hasattr(record, name):
                line[name] = getattr(record, name)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def log_config(settings: Settings) -> dict[str, Any]:
    """uvicorn's logging configuration for ``citeline serve``: citeline's own messages (open mode,
    answers stopped early, errors) go where uvicorn's go, in every worker; every line written while a
    request is served carries that request's id (ending the text line, a field of the JSON one); and
    access lines hide query values unless ``log_query_values``."""
    import uvicorn.config

    config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    as_json = settings.log_format == "json"
    config.setdefault("filters", {})["request_id"] = {"()": RequestIdLogFilter, "suffix": not as_json}
    config["filters"]["access"] = {"()": AccessLogFilter, "keep_query_values": settings.log_query_values}
    for handler in config["handlers"].values():
        handler.setdefault("filters", []).append("request_id")
    # On the logger, not a handler: the arguments are rewritten once, before any handler formats them.
    config["loggers"]["uvicorn.access"]["filters"] = ["access"]
    if as_json:
        config["formatters"] = {"json": {"()": JsonFormatter}}
        for handler in config["handlers"].values():
            handler["formatter"] = "json"
    else:
        config["formatters"]["access"]["fmt"] += " [request %(request_id)s]"
    config["loggers"]["citeline"] = {"handlers": ["default"], "level": "INFO", "propagate": False}
    return config
