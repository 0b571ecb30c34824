"""citeline: an evidence engine.

Documents go in (load -> split -> embed -> index); questions come out as ranked, citable passages
(retrieve -> fuse). The library is the product: the CLI and later the API, web pages and workers are
thin shells over it.
"""

import os

# onnxruntime (1.29 and later) sends usage telemetry from Linux to Microsoft's event collector and
# keeps a device id and an event queue under ~/.cache/Microsoft. citeline promises no network at run
# time except to services the user configured, so it opts out before any module imports onnxruntime:
# the runtime reads this variable once, when it is imported, and later calls cannot undo what that
# import already wrote. A user who sets the variable themselves keeps their choice.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

__version__ = "0.1.0"
