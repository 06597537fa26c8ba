"""Talking to the Docker Engine: one connection helper for the docker backend and the image build.

The Docker SDK (``pip install -e '.[docker]'``) is an optional extra: it is imported only
when a connection is made.
"""

from __future__ import annotations

import os
from typing import Any

from orchestrator.errors import LaunchError

ENGINE_TIMEOUT_S = 60
"""Seconds every call to the engine may take."""


def connect(timeout_s: float = ENGINE_TIMEOUT_S) -> Any:
    """A ``docker.DockerClient`` for the engine of the environment (``DOCKER_HOST`` or the local socket).

    Raises:
        LaunchError: when the SDK is missing or the engine does not answer.
    """
    try:
        import docker
    except ImportError:
        docker = None
    # Without the SDK, `import docker` run from a checkout finds the project's own docker/ folder
    # (a namespace package: no from_env): that is "not installed" too, not a crash.
    if docker is None or not hasattr(docker, "from_env"):
        raise LaunchError("the docker backend needs the Docker SDK, which is not installed: "
                          "pip install -e '.[docker]' (or pip install docker)")
    try:
        client = docker.from_env(timeout=int(timeout_s))
        client.ping()
    except docker.errors.DockerException as exc:
        where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise LaunchError(f"cannot reach the Docker engine at {where} ({exc}); start it (dockerd) "
                          "or use --backend local") from None
    return client


def engine_available() -> str:
    """"" when an engine answers, else why not (for tests that skip)."""
    try:
        connect(timeout_s=5).close()
    except LaunchError as exc:
        return str(exc)
    return ""
