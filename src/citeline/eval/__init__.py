"""Evaluation: BEIR-format retrieval benchmarks and their metrics."""
