"""citeline's benchmarks: run with ``make bench`` (``python -m bench.run``)."""
