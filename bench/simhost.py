"""A lightweight process carrying many simulated tasks: one gRPC channel and one heartbeat
stream (``tfcluster.v1.Supervisor/StreamHeartbeats``, the real protocol and token) per task,
all on one ``grpc.aio`` event loop. No TensorFlow.

``python -m bench.simhost ADDRESS TOKEN --mode scale``: reads commands on stdin, one a line:
``start TYPE INDEX ATTEMPT`` (stream a TRAINING heartbeat with a new step every
``--interval`` seconds; ``--per-connection N``: N tasks' streams share one HTTP/2 connection,
default one each, as real tasks), ``freeze TYPE INDEX ATTEMPT`` (stop sending, keep the stream open: a
frozen task), ``kill TYPE INDEX ATTEMPT`` (cancel the stream: the connection drops).

``--mode ingest --streams N --seconds S``: open N streams, wait for ``go`` on stdin, then
send heartbeats as fast as the streams take them for S seconds (``--rate R``: R heartbeats/s in
all, spread evenly over the streams, instead); prints the count sent.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
import time

import grpc

from orchestrator import env, tls
from orchestrator.proto import supervisor_pb2 as pb

METHOD = "/tfcluster.v1.Supervisor/StreamHeartbeats"


def _heartbeat(task_type: str, index: int, attempt: int, seq: int) -> pb.Heartbeat:
    hb = pb.Heartbeat(task=pb.TaskKey(task_type=task_type, task_index=index, attempt=attempt), sequence=seq,
                      pid=os.getpid(), phase=pb.PHASE_TRAINING, step=seq, epoch=seq // 100, loss=0.5,
                      examples_per_second=1000.0, cpu_percent=50.0, rss_bytes=700 << 20)
    hb.metrics["global_batch_size"] = 32.0
    return hb


class SimTask:
    def __init__(self, host: "Host", task_type: str, index: int, attempt: int) -> None:
        self.key = (task_type, index, attempt)
        self.frozen = asyncio.Event()
        self.channel, self.shared = host.channel()
        self.call = None
        self.killed = False
        self.task = asyncio.ensure_future(self.run(host))

    async def run(self, host: "Host") -> None:
        stream = self.channel.stream_unary(METHOD, request_serializer=pb.Heartbeat.SerializeToString,
                                           response_deserializer=pb.StreamSummary.FromString)

        async def beats():
            seq = 0
            while True:
                if self.frozen.is_set():
                    await asyncio.Event().wait()  # frozen forever, the stream stays open
                yield _heartbeat(*self.key, seq)
                seq += 1
                await asyncio.sleep(host.interval_s)

        backoff_s = 0.2
        while not self.killed:  # reconnect like the real HeartbeatReporter (a burst of connects may be refused)
            self.call = stream(beats(), metadata=((env.TOKEN_METADATA_KEY, host.token),))
            try:
                await self.call
                return
            except asyncio.CancelledError:
                return
            except grpc.aio.AioRpcError:
                await asyncio.sleep(backoff_s)
                backoff_s = min(2 * backoff_s, 2.0)

    async def kill(self) -> None:
        self.killed = True
        if self.call is not None:
            self.call.cancel()
        if not self.shared:
            await self.channel.close(None)


class Host:
    def __init__(self, address: str, token: str, interval_s: float, per_connection: int = 1) -> None:
        self.address, self.token, self.interval_s = address, token, interval_s
        self.per_connection = per_connection
        self.tasks: dict[tuple, SimTask] = {}
        self._channel = None
        self._on_channel = 0

    def channel(self):
        """A channel for a new task, and whether it is shared (closed with the host, not the task)."""
        options = [("grpc.use_local_subchannel_pool", 1)]
        if self.per_connection <= 1:
            return grpc.aio.insecure_channel(self.address, options=options), False
        if self._channel is None or self._on_channel >= self.per_connection:
            self._channel, self._on_channel = grpc.aio.insecure_channel(self.address, options=options), 0
        self._on_channel += 1
        return self._channel, True

    async def command(self, line: str) -> None:
        verb, task_type, index, attempt = line.split()
        key = (task_type, int(index), int(attempt))
        if verb == "start":
            self.tasks[key] = SimTask(self, *key)
        elif verb == "freeze" and key in self.tasks:
            self.tasks[key].frozen.set()
        elif verb == "kill" and key in self.tasks:
            await self.tasks.pop(key).kill()


def _stdin_lines(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue) -> None:
    for line in sys.stdin:
        loop.call_soon_threadsafe(queue.put_nowait, line.strip())
    loop.call_soon_threadsafe(queue.put_nowait, None)


async def scale_main(args) -> None:
    host = Host(args.address, args.token, args.interval, args.per_connection)
    queue: asyncio.Queue = asyncio.Queue()
    threading.Thread(target=_stdin_lines, args=(asyncio.get_running_loop(), queue), daemon=True).start()
    while (line := await queue.get()) is not None:
        if line:
            await host.command(line)
    for task in list(host.tasks.values()):
        await task.kill()


async def ingest_main(args) -> None:
    sent = [0]
    go = asyncio.Event()
    stop_at = [0.0]
    payloads = [_heartbeat("worker", i, 0, 7).SerializeToString() for i in range(args.first, args.first + args.streams)]

    async def one(i: int) -> None:
        channel = tls.channel(args.address, tls.files_for(args.tls, tls.SHARED) if args.tls else None,
                              [("grpc.use_local_subchannel_pool", 1)], aio=True)
        stream = channel.stream_unary(METHOD, request_serializer=None,
                                      response_deserializer=pb.StreamSummary.FromString)
        payload = payloads[i]

        async def beats():
            yield payload  # connected
            await go.wait()
            if args.rate > 0:  # paced: each stream at rate / streams per second, from a staggered start
                interval = args.streams / args.rate
                due = time.monotonic() + interval * i / args.streams
                while (now := time.monotonic()) < stop_at[0]:
                    if due > now:
                        await asyncio.sleep(due - now)
                    due = max(due + interval, now)  # a slot missed (a starved client) is dropped, not sent in a burst
                    yield payload
                    sent[0] += 1
                return
            while time.monotonic() < stop_at[0]:
                yield payload  # pre-serialized bytes: the client's cost stays low
                sent[0] += 1

        try:
            await stream(beats(), metadata=((env.TOKEN_METADATA_KEY, args.token),))
        except grpc.aio.AioRpcError as exc:
            print(f"stream {i} failed: {exc.code()}", file=sys.stderr, flush=True)
        await channel.close(None)

    runners = [asyncio.ensure_future(one(i)) for i in range(args.streams)]
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    stop_at[0] = time.monotonic() + args.seconds
    go.set()
    await asyncio.gather(*runners)
    print(f"sent {sent[0]}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("address")
    parser.add_argument("token")
    parser.add_argument("--mode", choices=("scale", "ingest"), default="scale")
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--per-connection", type=int, default=1)
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rate", type=float, default=0.0,
                        help="ingest: heartbeats/s in all, paced over the streams (0: as fast as they go)")
    parser.add_argument("--tls", default="", metavar="DIR",
                        help="ingest: mutual TLS with the run's certificates in DIR")
    args = parser.parse_args()
    asyncio.run(scale_main(args) if args.mode == "scale" else ingest_main(args))


if __name__ == "__main__":
    main()
