"""Elastic workers on what a node can give (docs/elastic.md, issue 34 item 1): "the job starts at
MAX where the backend can place MAX, else at what it can place if that is at least MIN".

One rule for both places that limit the size on the local and docker backends:

* the node's GPUs asked per task (:func:`orchestrator.resources.placement.place_elastic`);
* what the other runs of the machine lease now, cores, GPUs and ports
  (:func:`orchestrator.resources.leases.decide_sized`).

The sizes tried are the job's size (MAX, or the ``start`` of a resumed run), then each smaller one
down to MIN that its batch policy accepts (:func:`orchestrator.spec.elastic.valid_sizes`); the first
that fits is the size the job starts at, with one warning line naming both sizes. A fixed count is
tried at its size only. Pure: the caller passes how one size is tried.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TypeVar

from orchestrator.spec.elastic import valid_sizes
from orchestrator.spec.model import JobSpec

T = TypeVar("T")
SHRUNK = "elastic workers: "
"""How the warning of a job started below its size begins (:func:`shrunk_note`)."""


def sizes_to_try(spec: JobSpec) -> list[int]:
    """``spec.workers`` first, then the smaller sizes down to MIN that the batch policy accepts,
    largest first; ``[spec.workers]`` for a fixed count."""
    if spec.elastic is None:
        return [spec.workers]
    valid = valid_sizes(spec.elastic, spec.strategy.value, spec.chief, spec.training.batch_size_per_replica)
    return [spec.workers] + [n for n in sorted(valid, reverse=True) if n < spec.workers]


def shrunk_note(spec: JobSpec, workers: int, problem: str) -> str:
    """The warning of a job that starts below its size: ``elastic workers: 4 cannot be placed
    (PROBLEM); the job starts at 2 (its range 1..4)``."""
    assert spec.elastic is not None
    return (f"{SHRUNK}{spec.workers} cannot be placed ({problem}); the job starts at {workers} "
            f"(its range {spec.elastic.min}..{spec.elastic.max})")


def largest_that_fits(spec: JobSpec, attempt: Callable[[JobSpec], T],
                      fits: Callable[[T], bool]) -> tuple[list[tuple[JobSpec, T]], int | None]:
    """Try ``spec`` at each size of :func:`sizes_to_try`, largest first, until one fits.

    Args:
        spec: the validated spec (its ``workers`` is the size wanted).
        attempt: one size's outcome (a spec at that size in, anything out; no exception expected).
        fits: whether an outcome lets the job start.

    Returns:
        Every size tried with its outcome, in order, and the index of the one that fits (the
        last tried), or None when none does (then every size down to MIN was tried).
    """
    tried: list[tuple[JobSpec, T]] = []
    for workers in sizes_to_try(spec):
        sized = spec if workers == spec.workers else dataclasses.replace(spec, workers=workers)
        outcome = attempt(sized)
        tried.append((sized, outcome))
        if fits(outcome):
            return tried, len(tried) - 1
    return tried, None
