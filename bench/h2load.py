"""A cheap, paced heartbeat load generator: the real ``StreamHeartbeats`` call, spoken as raw HTTP/2.

``python -m bench.h2load ADDRESS TOKEN --connections N --first I``: opens N connections, one
``tfcluster.v1.Supervisor/StreamHeartbeats`` call on each (the real path, ``x-job-token``
metadata, one serialized ``Heartbeat`` per gRPC message), sends one heartbeat on each (so the
server has seen every stream) and prints ``ready``. Then it reads commands on stdin:
``rate R`` (send R heartbeats/s in all, round-robin over the connections), ``q`` (prints
``sent S blocked B``) and EOF (ends).

Why not grpc.aio: its client costs about as much CPU per message as the server (one completion
and one event-loop wake-up per write), so on a 2-core machine the clients took half the cores
and the figure was the machine's, not the server's. Here a message costs one ``send()``.

What the server sees is what real tasks send it: one connection per task, one DATA frame per
heartbeat, each heartbeat written on its own (a connection's next heartbeat follows N / R
seconds later), never several heartbeats coalesced into one write. Flow control is honoured:
SETTINGS and PING are acknowledged, WINDOW_UPDATEs are applied, and a heartbeat that the
send window would not admit is not sent (counted as ``blocked``).
"""

from __future__ import annotations

import argparse
import os
import selectors
import socket
import struct
import sys
import threading
import time

from orchestrator import env
from orchestrator.proto import supervisor_pb2 as pb

METHOD = "/tfcluster.v1.Supervisor/StreamHeartbeats"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0, 1, 3, 4, 6, 7, 8
ACK, END_STREAM, END_HEADERS = 0x1, 0x1, 0x4
STREAM = 1
SETTINGS_INITIAL_WINDOW_SIZE = 4
DEFAULT_WINDOW = 65535


def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes((kind, flags)) + struct.pack(">I", stream) + payload


def _hpack_int(value: int, prefix_bits: int) -> bytes:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((value,))
    out = bytearray((limit,))
    value -= limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def hpack_literal(headers: list[tuple[str, str]]) -> bytes:
    """Header block of literals without indexing, new names, no Huffman (RFC 7541 6.2.2)."""
    out = bytearray()
    for name, value in headers:
        out += b"\x00" + _hpack_int(len(name), 7) + name.encode() + _hpack_int(len(value), 7) + value.encode()
    return bytes(out)


def heartbeat_bytes(index: int) -> bytes:
    hb = pb.Heartbeat(task=pb.TaskKey(task_type="worker", task_index=index, attempt=0), sequence=7, pid=os.getpid(),
                      phase=pb.PHASE_TRAINING, step=7, epoch=0, loss=0.5, examples_per_second=1000.0,
                      cpu_percent=50.0, rss_bytes=700 << 20)
    hb.metrics["global_batch_size"] = 32.0
    return hb.SerializeToString()


class Connection:
    """One task's connection and its one StreamHeartbeats call."""

    def __init__(self, address: str, token: str, index: int) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        message = heartbeat_bytes(index)
        self.data = frame(DATA, 0, STREAM, b"\x00" + struct.pack(">I", len(message)) + message)
        self.cost = len(self.data) - 9  # what a DATA frame takes from the send windows
        self.conn_window = self.stream_window = DEFAULT_WINDOW
        self.inbuf = b""
        self.closed: str | None = None
        headers = [(":method", "POST"), (":scheme", "http"), (":path", METHOD), (":authority", address),
                   ("content-type", "application/grpc"), ("te", "trailers"), (env.TOKEN_METADATA_KEY, token)]
        self.sock.sendall(PREFACE + frame(SETTINGS, 0, 0, b"")
                          + frame(HEADERS, END_HEADERS, STREAM, hpack_literal(headers)))
        self.sock.setblocking(False)

    def send_one(self) -> bool:
        """One heartbeat in its own write; False when flow control (or a full socket) holds it."""
        if self.closed or self.conn_window < self.cost or self.stream_window < self.cost:
            return False
        try:
            n = self.sock.send(self.data)
        except BlockingIOError:
            return False
        except OSError as exc:
            self.closed = repr(exc)
            return False
        if n != len(self.data):  # a partial write of a tiny frame: finish it, blocking briefly
            self.sock.setblocking(True)
            self.sock.settimeout(5)
            self.sock.sendall(self.data[n:])
            self.sock.setblocking(False)
        self.conn_window -= self.cost
        self.stream_window -= self.cost
        return True

    def on_readable(self) -> None:
        try:
            chunk = self.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError as exc:
            self.closed = repr(exc)
            return
        if not chunk:
            self.closed = self.closed or "connection closed by the server"
            return
        buf = self.inbuf + chunk
        replies = []
        while len(buf) >= 9:
            length = int.from_bytes(buf[:3], "big")
            if len(buf) < 9 + length:
                break
            kind, flags, stream = buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
            payload = buf[9:9 + length]
            buf = buf[9 + length:]
            if kind == SETTINGS and not flags & ACK:
                for i in range(0, len(payload) - 5, 6):
                    ident, value = struct.unpack(">HI", payload[i:i + 6])
                    if ident == SETTINGS_INITIAL_WINDOW_SIZE:
                        self.stream_window += value - DEFAULT_WINDOW
                replies.append(frame(SETTINGS, ACK, 0, b""))
            elif kind == PING and not flags & ACK:
                replies.append(frame(PING, ACK, 0, payload))
            elif kind == WINDOW_UPDATE:
                increment = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
                if stream == 0:
                    self.conn_window += increment
                else:
                    self.stream_window += increment
            elif kind in (RST_STREAM, GOAWAY) or (kind == HEADERS and flags & END_STREAM):
                self.closed = self.closed or f"server ended the call (frame type {kind}: {payload[:200]!r})"
        self.inbuf = buf
        if replies:
            self.sock.setblocking(True)
            self.sock.settimeout(5)
            self.sock.sendall(b"".join(replies))
            self.sock.setblocking(False)


def run(address: str, token: str, connections: int, first: int) -> None:
    conns = [Connection(address, token, first + i) for i in range(connections)]
    selector = selectors.DefaultSelector()
    for c in conns:
        selector.register(c.sock, selectors.EVENT_READ, c)
    state = {"rate": 0.0, "end": False}
    sent = blocked = 0
    for c in conns:  # every stream says hello once
        sent += c.send_one()
    print("ready", flush=True)

    def commands() -> None:
        for line in sys.stdin:
            words = line.split()
            if words and words[0] == "rate":
                state["rate"] = float(words[1])
            elif words and words[0] == "q":
                print(f"sent {sent} blocked {blocked}", flush=True)
        state["end"] = True

    threading.Thread(target=commands, daemon=True).start()
    nxt, due, rate, t_last = 0, 0.0, 0.0, time.monotonic()
    while not state["end"]:
        for key, _ in selector.select(0.002):
            key.data.on_readable()
        now = time.monotonic()
        if state["rate"] != rate:
            rate, due = state["rate"], 0.0
        due += rate * (now - t_last)
        t_last = now
        n = min(int(due), connections)  # at most one heartbeat per connection per pass
        due -= n
        for _ in range(n):
            if conns[nxt].send_one():
                sent += 1
            else:
                blocked += 1
            nxt = (nxt + 1) % connections
        due = min(due, rate * 0.05)  # a stall (descheduled) is not made up in a burst
    failed = [c.closed for c in conns if c.closed]
    if failed:
        print(f"{len(failed)} connections failed, e.g. {failed[0]}", file=sys.stderr, flush=True)
    for c in conns:
        c.sock.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("address")
    parser.add_argument("token")
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--first", type=int, default=0)
    args = parser.parse_args()
    run(args.address, args.token, args.connections, args.first)


if __name__ == "__main__":
    main()
