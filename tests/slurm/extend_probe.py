"""Run inside ``salloc -N2`` by tests/slurm/test_slurm_extend.py: the Slurm backend's growth commands
without TensorFlow (:mod:`orchestrator.backends.slurm_extend`), each wait bounded. Prints one JSON object.

1. ``--workers 1:2`` on osl0 and osl1, osl1 then taken for lost: the watch asks for an extension (the
   test holds osl2: it waits), finds osl1 answering again and running a step, so it is room (2); the
   extension is cancelled, not needed, and the next placement uses osl1.
2. ``--workers 1:3`` (MAX needs a third node; the test holds osl2): an extension is asked, stays
   pending, is cancelled once the bound passes (said once) and asked again, twice (the asks after
   the run's first are logged, not said); ``close`` cancels it.

With ``together`` (inside ``salloc -N1``, osl1 and osl2 free): a grow asked by ``resize`` to 3 of
``--workers 1:3`` is two nodes short: both extensions are asked at once; both are granted, each on
its own node (Slurm may start two on one node, which holds two 1-CPU jobs: the second is then
cancelled and asked again without it); ``close`` cancels them.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import orchestrator.backends.slurm_extend as extend
from orchestrator.backends.slurm import SlurmBackend
from orchestrator.handle import asked_room
from orchestrator.spec.elastic import ElasticSpec
from orchestrator.spec.model import JobSpec

extend.GRANT_TIMEOUT_S, extend.RETRY_AFTER_S = 2.0, 0.5


def spec(workers: int, hi: int) -> JobSpec:
    return JobSpec.create(strategy="multi_worker_mirrored", workers=workers,
                          elastic=ElasticSpec(1, hi, "keep-per-replica", grow_back_s=2.0))


def ask(room, until, timeout_s: float = 30.0) -> tuple[int | None, list[str]]:
    """Call the room as the grow-back watch does (it says the grow is due) until ``until(answer, news)``."""
    news: list[str] = []
    deadline = time.monotonic() + timeout_s
    while True:
        answer = room()
        news += room.news()
        if until(answer, news) or time.monotonic() > deadline:
            return answer, news
        time.sleep(0.2)


runs = Path(sys.argv[1])
out: dict[str, object] = {}
backend = SlurmBackend()
backend.open("ext", runs / "ext")
if sys.argv[2:] == ["together"]:
    extend.GRANT_TIMEOUT_S = 60.0  # both are started at once here: no bound is tested
    try:
        backend.allocate(spec(1, 3))
        room = asked_room(spec(1, 3), backend)  # what the API gives the supervisor for a grow asked by `resize`
        news: list[str] = []
        asked_at_first: list[str] = []
        deadline = time.monotonic() + 60.0
        while time.monotonic() < deadline:
            answer = room.for_size(3)
            news += room.news()
            if not asked_at_first and backend.extensions.ever:
                time.sleep(0.5)  # the watch's first look asks for every node short at once
                asked_at_first = list(backend.extensions.ever)
            if answer >= 3:
                break
            time.sleep(0.2)
        out.update(room=answer, news=news, asked_at_first=asked_at_first, granted=backend.extensions.granted(),
                   placement=sorted(backend.allocate(spec(3, 3)).values()))
    finally:
        backend.close()
    out["ext_asked"] = list(backend.extensions.ever)
    print(json.dumps(out))
    sys.exit(0)
try:
    backend.allocate(spec(2, 2))
    backend.lost.add("osl1")  # as a lost node; its slurmd answers
    room = backend.growth.grow_room(spec(1, 2))
    out["back_room"], out["back_news"] = ask(room, lambda answer, news: answer == 2 and "cancelled" in news[-1])
    out["back_placement"] = sorted(backend.allocate(spec(2, 2)).values())
    out["back_asked"] = list(backend.extensions.ever)
    room = backend.growth.grow_room(spec(2, 3))
    out["late_room"], out["late_news"] = ask(room, lambda answer, news: len(backend.extensions.ever) >= 4)
    out["late_asked"] = list(backend.extensions.ever)
finally:
    backend.close()
out["ext_asked"] = list(backend.extensions.ever)
print(json.dumps(out))
