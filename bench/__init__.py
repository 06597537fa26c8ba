"""Benchmark suite: what the orchestrator costs, against a hand-launched cluster.

Run ``python -m bench`` (``--quick`` for a smoke run). Results: ``bench/results/*.json``
and ``bench/results/README.md``. Not part of the test suite.
"""
