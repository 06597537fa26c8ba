"""Experiment: does a trainer that re-attaches to the same tf.data service job keep the data
position (issue 38, docs/data-service.md)?

One process runs a fault-tolerant ``DispatchServer`` (journal in a temp dir,
``job_gc_timeout_ms`` 300 s) and one ``WorkerServer``; a consumer process reads
``range(N)`` through ``distribute(ShardingPolicy.DYNAMIC, job_name=J)``, prints each element and
is SIGKILLed after ``--kill-after`` elements (a trainer group dying mid-epoch); a second consumer
process then reads the same job name. The first element the second consumer gets, and how many
elements neither consumer saw, answer the question. ``--restart-dispatcher`` also restarts the
dispatcher from its journal between the two consumers (a dispatcher restart on top).

    python -m bench.data_service_rejoin [--kill-after 20] [--restart-dispatcher]

Prints one JSON line: first elements of both consumers, elements skipped, elements repeated.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile

N = 2000

CONSUMER = r"""
import sys, tensorflow as tf
svc = tf.data.experimental.service
ds = tf.data.Dataset.range({n}).apply(svc.distribute(processing_mode=svc.ShardingPolicy.DYNAMIC,
                                                    service="grpc://{address}", job_name="rejoin"))
for i, x in enumerate(ds):
    print(int(x), flush=True)
    if i + 1 >= {limit}:
        break
"""


def consume(address: str, limit: int, kill: bool) -> list[int]:
    """Run a consumer process; read ``limit`` elements (then SIGKILL it when ``kill``)."""
    proc = subprocess.Popen([sys.executable, "-c", CONSUMER.format(n=N, address=address, limit=limit if not kill
                                                                   else N)],
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    seen: list[int] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(int(line))
        if kill and len(seen) >= limit:
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait(60)
    return seen


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kill-after", type=int, default=20)
    p.add_argument("--read-after", type=int, default=40)
    p.add_argument("--restart-dispatcher", action="store_true")
    args = p.parse_args(argv)
    import tensorflow as tf

    svc = tf.data.experimental.service
    work_dir = tempfile.mkdtemp(prefix="dispatcher-")

    def dispatcher(port: int = 0):
        return svc.DispatchServer(svc.DispatcherConfig(port=port, work_dir=work_dir, fault_tolerant_mode=True,
                                                       job_gc_timeout_ms=300_000))

    d = dispatcher()
    address = d.target.split("://")[1]
    port = int(address.rpartition(":")[2])
    w = svc.WorkerServer(svc.WorkerConfig(dispatcher_address=address))
    first = consume(address, args.kill_after, kill=True)
    if args.restart_dispatcher:
        d.stop()
        d = dispatcher(port)
    second = consume(address, args.read_after, kill=False)
    seen = set(first) | set(second)
    top = max(seen)
    out = {"kill_after": args.kill_after, "restart_dispatcher": args.restart_dispatcher,
           "first_consumer": first[:5] + ["..."] + first[-2:], "second_consumer_first": second[:5],
           "second_starts_at": min(second), "skipped": sorted(set(range(top + 1)) - seen)[:50],
           "skipped_count": len(set(range(top + 1)) - seen), "repeated": sorted(set(first) & set(second))[:50]}
    print(json.dumps(out))
    del w
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
