"""The project's container image: one image for every role, built from ``docker/Dockerfile``.

Its tag is ``tf-cluster-orchestrator:<hash>``, the hash of everything that goes into it
(the Dockerfile, ``pyproject.toml``, ``README.md``, the sources of ``orchestrator``,
``worker`` and ``ps``, and the base image's name), so an image is reused exactly when
nothing that goes into it changed, and the Compose file and ``launch --backend docker``
agree on the tag without asking the engine.

The image is built from a temporary context holding only those files (and, when given,
a CA bundle that pip inside the build trusts: a proxy or private index). The base image
(``--base-image``, env ``ORCH_DOCKER_BASE_IMAGE``, default ``python:3.11-slim``) must be
in the engine or pullable.

``python -m orchestrator.backends.image [--base-image B] [--ca-bundle F]`` builds (or
reuses) the image and prints its tag.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

from orchestrator.backends.engine import connect
from orchestrator.errors import LaunchError

REPOSITORY = "tf-cluster-orchestrator"
DEFAULT_BASE_IMAGE = "python:3.11-slim"
BASE_IMAGE_ENV = "ORCH_DOCKER_BASE_IMAGE"
DOCKERFILE = "docker/Dockerfile"
CERTS_DIR = "docker/certs"
BUILD_TIMEOUT_S = 1800
_TOP_FILES = ("pyproject.toml", "README.md", DOCKERFILE)
_PACKAGES = ("orchestrator", "worker", "ps", "dataservice")


def source_root() -> Path:
    """The checkout this package runs from (where ``docker/Dockerfile`` is).

    Raises:
        LaunchError: when the package was not installed from a checkout (no Dockerfile).
    """
    root = Path(__file__).resolve().parents[2]
    if not (root / DOCKERFILE).is_file():
        raise LaunchError(
            f"{root / DOCKERFILE} not found: build the image from a clone of the repository "
            "(pip install -e .) or pass --image with an image you built"
        )
    return root


def default_base_image() -> str:
    """``$ORCH_DOCKER_BASE_IMAGE`` or ``python:3.11-slim``."""
    return os.environ.get(BASE_IMAGE_ENV) or DEFAULT_BASE_IMAGE


def image_files(root: Path) -> list[str]:
    """Paths (relative to ``root``, sorted) of every file that goes into the image."""
    files = [name for name in _TOP_FILES if (root / name).is_file()]
    for package in _PACKAGES:
        for path in sorted((root / package).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".pyo"):
                files.append(path.relative_to(root).as_posix())
    return sorted(files)


def image_tag(base_image: str, root: Path | None = None) -> str:
    """``tf-cluster-orchestrator:<12 hex>``: a hash of the image's files and its base image."""
    root = root or source_root()
    digest = hashlib.sha256(f"base={base_image}\n".encode())
    for name in image_files(root):
        digest.update(name.encode() + b"\0")
        digest.update((root / name).read_bytes())
        digest.update(b"\0")
    return f"{REPOSITORY}:{digest.hexdigest()[:12]}"


def write_context(root: Path, dest: Path, ca_bundle: str | Path | None = None) -> None:
    """Copy the image's files into ``dest`` (the build context): what ``docker build .`` in
    the checkout would send (so both share the engine's layer cache), plus ``ca_bundle``
    as ``docker/certs/host-ca.crt`` when given."""
    certs = root / CERTS_DIR
    names = image_files(root) + [p.relative_to(root).as_posix() for p in sorted(certs.glob("*")) if p.is_file()]
    for name in names:
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / name, target)
    (dest / CERTS_DIR).mkdir(parents=True, exist_ok=True)
    if ca_bundle:
        shutil.copyfile(ca_bundle, dest / CERTS_DIR / "host-ca.crt")


def ensure_image(
    client: Any,
    base_image: str | None = None,
    *,
    ca_bundle: str | Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> str:
    """Return the tag of the project image, building it when the engine lacks it.

    Args:
        client: a ``docker.DockerClient``.
        base_image: the ``BASE_IMAGE`` build argument (default :func:`default_base_image`).
        ca_bundle: PEM file pip trusts inside the build (default: ``$PIP_CERT`` if it is a file).
        progress: called with each line of build output (default: nothing).

    Raises:
        LaunchError: when the build fails (its last lines quoted).
    """
    import docker.errors

    base_image = base_image or default_base_image()
    root = source_root()
    tag = image_tag(base_image, root)
    try:
        client.images.get(tag)
        return tag
    except docker.errors.ImageNotFound:
        pass
    if ca_bundle is None and os.path.isfile(os.environ.get("PIP_CERT", "")):
        ca_bundle = os.environ["PIP_CERT"]
    buildargs = {"BASE_IMAGE": base_image}
    for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"):  # only remote indexes mean anything inside the build
        value = " ".join(u for u in os.environ.get(name, "").split() if u.startswith(("http://", "https://")))
        if value:
            buildargs[name] = value
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tfjob-image-") as context:
        write_context(root, Path(context), ca_bundle)
        try:
            for line in _build(client, context, tag, buildargs):
                lines.append(line)
                if progress:
                    progress(line)
        except docker.errors.DockerException as exc:
            raise LaunchError(f"building {tag} on {base_image} failed: {exc}") from exc
    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        tail = "\n".join(lines[-15:])
        raise LaunchError(f"building {tag} on {base_image} failed:\n{tail}") from None
    return tag


def _build(client: Any, context: str, tag: str, buildargs: dict[str, str]) -> Iterator[str]:
    import docker

    api = docker.from_env(timeout=BUILD_TIMEOUT_S).api  # a build step may print nothing for minutes
    try:
        for chunk in api.build(path=context, dockerfile=DOCKERFILE, tag=tag, buildargs=buildargs,
                               rm=True, forcerm=True, decode=True, labels={"io.tf-cluster-orchestrator.image": "1"}):
            if "error" in chunk:
                yield "ERROR: " + str(chunk["error"]).rstrip()
            elif chunk.get("stream"):
                for line in str(chunk["stream"]).splitlines():
                    if line.strip():
                        yield line.rstrip()
    finally:
        api.close()


def main(argv: list[str] | None = None) -> int:
    """Build or reuse the image; print its tag. Exit 0, or 1 with one line on stderr."""
    parser = argparse.ArgumentParser(prog="python -m orchestrator.backends.image", description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-image", default=None,
                        help=f"base image (default ${BASE_IMAGE_ENV} or {DEFAULT_BASE_IMAGE})")
    parser.add_argument("--ca-bundle", default=None, help="CA bundle pip trusts inside the build (default $PIP_CERT)")
    parser.add_argument("--tag-only", action="store_true", help="print the tag the image would have; build nothing")
    args = parser.parse_args(argv)
    try:
        if args.tag_only:
            print(image_tag(args.base_image or default_base_image()))
            return 0
        client = connect()
        try:
            print(ensure_image(client, args.base_image, ca_bundle=args.ca_bundle,
                               progress=lambda line: print(line, file=sys.stderr, flush=True)))
        finally:
            client.close()
    except LaunchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
