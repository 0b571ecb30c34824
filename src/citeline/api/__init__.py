"""citeline's REST API: a thin HTTP shell over :class:`citeline.engine.Citeline` (``citeline serve``).

``create_app(settings)`` builds the FastAPI application; routes live in ``routes/``, request
dependencies (the library instance, the caller's access grant) in ``deps``, the limits in ``limits``
and the one error shape in ``errors``.
"""

from citeline.api.app import create_app

__all__ = ["create_app"]
