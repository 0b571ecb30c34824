"""Retrieval: dense and keyword search under the same filters, fused into one ranking."""
