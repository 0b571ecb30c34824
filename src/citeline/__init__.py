"""citeline: an evidence engine.

Documents go in (load -> split -> embed -> index); questions come out as ranked, citable passages
(retrieve -> fuse). The library is the product: the CLI and later the API, web pages and workers are
thin shells over it.
"""

__version__ = "0.1.0"
