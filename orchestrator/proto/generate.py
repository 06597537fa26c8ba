"""Regenerate the committed gRPC stubs from ``supervisor.proto``.

Run ``python -m orchestrator.proto.generate`` from the repository root after
editing the ``.proto``. The generator version is pinned (``GRPCIO_TOOLS_VERSION``)
so every developer produces byte-identical stubs; ``tests/unit/test_proto_stubs.py``
fails when the committed stubs differ from a fresh generation.

Raises:
    SystemExit: with code 2 when the installed grpcio-tools is not the pinned one.
"""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

GRPCIO_TOOLS_VERSION = "1.85.1"
PROTO_DIR = Path(__file__).resolve().parent
REPO_ROOT = PROTO_DIR.parent.parent
PROTO = PROTO_DIR / "supervisor.proto"


def generate(out_dir: Path) -> list[Path]:
    """Generate ``supervisor_pb2.py``, ``.pyi`` and ``_grpc.py`` into ``out_dir``.

    Args:
        out_dir: directory that stands for the repository root; files land in
            ``out_dir/orchestrator/proto/``.

    Returns:
        Paths of the generated files.

    Raises:
        RuntimeError: when protoc reports an error.
    """
    installed = metadata.version("grpcio-tools")  # only needed by developers, not at run time
    if installed != GRPCIO_TOOLS_VERSION:
        raise RuntimeError(
            f"grpcio-tools {installed} is installed; the stubs are pinned to {GRPCIO_TOOLS_VERSION}: "
            f"pip install grpcio-tools=={GRPCIO_TOOLS_VERSION}"
        )
    target = out_dir / "orchestrator" / "proto"
    target.mkdir(parents=True, exist_ok=True)
    # protoc in a process of its own: its C++ runtime must not share one with whatever the caller loaded
    # (in a long pytest run, the in-process compiler once crashed with SIGSEGV)
    code = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{REPO_ROOT}",
            f"--python_out={out_dir}",
            f"--pyi_out={out_dir}",
            f"--grpc_python_out={out_dir}",
            str(PROTO),
        ],
        check=False,
    ).returncode
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code}")
    return sorted(target.glob("supervisor_pb2*"))


def main() -> int:
    try:
        paths = generate(REPO_ROOT)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path in paths:
        print(path.relative_to(REPO_ROOT))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
