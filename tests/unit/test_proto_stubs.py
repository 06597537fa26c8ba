"""The committed gRPC stubs must match a fresh generation from supervisor.proto."""

from __future__ import annotations

from pathlib import Path

from orchestrator.proto import generate


def test_committed_stubs_are_fresh(tmp_path: Path):
    fresh = generate.generate(tmp_path)
    assert {p.name for p in fresh} == {"supervisor_pb2.py", "supervisor_pb2.pyi", "supervisor_pb2_grpc.py"}
    for path in fresh:
        committed = generate.PROTO_DIR / path.name
        assert committed.read_text() == path.read_text(), (
            f"{committed} is stale: run `python -m orchestrator.proto.generate` and commit the result"
        )
