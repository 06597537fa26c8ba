"""The task side of the standard gRPC health protocol (``grpc.health.v1``), for containers.

* :func:`serve_task_health` starts a tiny ``grpc.health.v1.Health`` server inside a task
  (``orchestrator.task.runtime.run_task`` does it when ``ORCH_TASK_HEALTH_PORT`` is set); it
  answers SERVING for as long as the task process lives.
* ``python -m orchestrator.task.probe HOST:PORT`` is the probe a container healthcheck
  runs: exit 0 when the server answers SERVING within the timeout, 1 otherwise (like
  ``grpc_health_probe``). ``--from-env`` probes ``127.0.0.1:$ORCH_TASK_HEALTH_PORT`` and
  succeeds when that variable is unset (no server to check).
"""

from __future__ import annotations

import argparse
import sys
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from orchestrator import env


def serve_task_health(port: int, host: str = "0.0.0.0") -> tuple[grpc.Server, int]:
    """Start a ``grpc.health.v1`` server reporting SERVING on ``host:port`` (0: any free port).

    Returns:
        The server and the port it bound.

    Raises:
        RuntimeError: when the port cannot be bound.
    """
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="task-health"),
                         options=[("grpc.so_reuseport", 0)])
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise RuntimeError(f"cannot bind the task health server on {host}:{port}")
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    server.start()
    return server, bound


def probe(address: str, service: str = "", timeout_s: float = 3.0) -> tuple[bool, str]:
    """Ask ``address`` for the health of ``service``. Returns (serving, status text)."""
    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout_s
            )
        except grpc.RpcError as exc:
            return False, f"{exc.code().name}: {exc.details()}"
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    return reply.status == health_pb2.HealthCheckResponse.SERVING, status


def main(argv: list[str] | None = None) -> int:
    """Exit 0 when SERVING, 1 otherwise; one line on stdout either way."""
    parser = argparse.ArgumentParser(prog="python -m orchestrator.task.probe",
                                     description="Check a grpc.health.v1 server (exit 0 when SERVING).")
    parser.add_argument("address", nargs="?", help="host:port")
    parser.add_argument("--from-env", action="store_true", help=f"probe 127.0.0.1:${env.TASK_HEALTH_PORT}")
    parser.add_argument("--service", default="", help="service name (default: the server as a whole)")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds (default 3)")
    args = parser.parse_args(argv)
    address = args.address
    if args.from_env and not address:
        port = env.read(env.TASK_HEALTH_PORT)
        if not port:
            print(f"no task health server ({env.TASK_HEALTH_PORT} unset)")
            return 0
        address = f"127.0.0.1:{port}"
    if not address:
        parser.error("give HOST:PORT or --from-env")
    serving, status = probe(address, args.service, args.timeout)
    print(f"{address}: {status}")
    return 0 if serving else 1


if __name__ == "__main__":
    sys.exit(main())
