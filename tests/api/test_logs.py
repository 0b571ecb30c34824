"""What ``citeline serve`` writes in its access lines (the servers' own lines: test_metrics.py)."""

from __future__ import annotations

import json
import logging

from citeline.api.logs import AccessLogFilter, JsonFormatter, log_config, without_query_values
from citeline.settings import Settings


def access_record(path: str) -> logging.LogRecord:
    """An access line as uvicorn's HTTP protocol logs it."""
    return logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5000", "GET", path, "1.1", 200),
        None,
    )


def test_query_values_are_replaced_and_their_names_kept() -> None:
    assert without_query_values("/search?q=chest%20pain&n=5&scope=ward") == "/search?q=…&n=…&scope=…"
    assert without_query_values("/search?flag&q=") == "/search?flag&q=…"
    assert without_query_values("/documents/abc") == "/documents/abc"


def test_an_access_line_hides_query_values_unless_the_setting_keeps_them() -> None:
    hidden, kept = access_record("/search?q=chest+pain"), access_record("/search?q=chest+pain")
    assert AccessLogFilter().filter(hidden) and AccessLogFilter(keep_query_values=True).filter(kept)
    assert hidden.getMessage() == '127.0.0.1:5000 - "GET /search?q=… HTTP/1.1" 200'
    assert kept.getMessage() == '127.0.0.1:5000 - "GET /search?q=chest+pain HTTP/1.1" 200'
    line = json.loads(JsonFormatter().format(hidden))
    assert line["path"] == "/search?q=…" and line["method"] == "GET" and line["status"] == 200
    assert line["logger"] == "uvicorn.access" and line["level"] == "INFO" and line["request_id"] is None


def test_the_settings_choose_the_format_and_the_query_values() -> None:
    text = log_config(Settings())
    assert text["filters"]["access"]["keep_query_values"] is False
    assert "[request %(request_id)s]" in text["formatters"]["access"]["fmt"]
    as_json = log_config(Settings(log_format="json", log_query_values=True))
    assert as_json["filters"]["access"]["keep_query_values"] is True
    assert {h["formatter"] for h in as_json["handlers"].values()} == {"json"}
