"""The size of each task's container, as data: the spec file's ``containers`` section.

``containers: {shm_size: 2G, memory: 8G}`` sizes every task container of a job wherever it runs
in one (issue 35, item 4; docs/containers.md, "Shared memory and memory"):

* ``launch --backend docker``: each container's ``/dev/shm`` and memory limit;
* ``compose``: each service's ``shm_size`` and ``mem_limit``;
* ``render --format tfjob`` / ``jobset``: a ``medium: Memory`` ``emptyDir`` mounted at ``/dev/shm``
  with that ``sizeLimit``, and each pod's memory, requests = limits (``render --memory`` takes a
  Kubernetes quantity instead).

The local and slurm backends run no containers and ignore the section. The flags
(``--shm-size``, ``--memory``) override the file field by field, as every flag does
(:data:`orchestrator.spec.loader.FLAG_FIELDS`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from orchestrator.errors import SpecError
from orchestrator.spec.sizes import DEFAULT_SHM_SIZE_BYTES, parse_size

MIN_SHM_SIZE_BYTES = 1 << 20
"""Smallest ``shm_size``: 1 MiB (Docker refuses less than 4 KiB; less than 1 MiB is a typo)."""
MIN_MEMORY_BYTES = 64 << 20
"""Smallest ``memory``: 64 MiB (a Python interpreter with numpy does not start in less)."""

CONTAINER_KEYS = ("shm_size", "memory")
"""The keys of the ``containers`` section, in the file's order."""

FIX_EXAMPLES = {
    "shm_size": "e.g. --shm-size 2G, or containers: {shm_size: 2G} in the spec file (K, M, G: KiB, MiB, GiB)",
    "memory": "e.g. --memory 8G, or containers: {memory: 8G} in the spec file (K, M, G: KiB, MiB, GiB)",
}
"""Field -> the example of a good value each error names."""


@dataclass(frozen=True)
class ContainerSpec:
    """The size of each task's container (docker backend, Compose, Kubernetes pods).

    Attributes:
        shm_size: each container's ``/dev/shm``, bytes; written as a size (``2G``, ``512M``,
            ``1Gi``; K, M, G are KiB, MiB, GiB). Default 1 GiB
            (:data:`orchestrator.spec.sizes.DEFAULT_SHM_SIZE_BYTES`): Docker's own 64 MB is
            outgrown by multi-process data loading and NCCL, with a ``Bus error``. Docker backend:
            ``--shm-size``; Compose: ``shm_size``; TFJob / JobSet: a memory-backed ``emptyDir`` at
            ``/dev/shm`` with this ``sizeLimit`` (it counts against the pod's memory). At least 1M.
        memory: each container's memory limit, bytes, written as a size (``8G``); None
            (default): no limit. Docker backend: ``--memory`` (a task past it is OOM-killed, and
            the failure report says so); Compose: ``mem_limit``; TFJob / JobSet: each pod's
            memory, requests = limits. At least 64M.
    """

    shm_size: int = DEFAULT_SHM_SIZE_BYTES
    memory: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.shm_size, int) or isinstance(self.shm_size, bool) \
                or self.shm_size < MIN_SHM_SIZE_BYTES:
            raise SpecError("shm_size", self.shm_size, "must be a size of at least 1M", FIX_EXAMPLES["shm_size"])
        if self.memory is not None and (not isinstance(self.memory, int) or isinstance(self.memory, bool)
                                        or self.memory < MIN_MEMORY_BYTES):
            raise SpecError("memory", self.memory, "must be a size of at least 64M", FIX_EXAMPLES["memory"])

    @classmethod
    def from_raw(cls, raw: object) -> "ContainerSpec | None":
        """The ``containers`` section of a spec file (sizes as users write them: ``2G``, or bytes);
        None when absent or empty.

        Raises:
            SpecError: naming ``containers`` (not a mapping) or ``containers.<field>`` (not a size,
                or too small), with the fix.
        """
        if raw is None:
            return None
        if not isinstance(raw, Mapping):
            raise SpecError("containers", raw, "must be a mapping of container sizes",
                            "write containers: {shm_size: 2G, memory: 8G}; see docs/containers.md")
        fields: dict[str, Any] = {}
        for name, value in raw.items():
            if name not in CONTAINER_KEYS:
                raise SpecError(f"containers.{name}", value, "unknown key", "valid keys: " + ", ".join(CONTAINER_KEYS))
            if value is None:
                continue
            fields[name] = parse_size(f"containers.{name}", value, FIX_EXAMPLES[name])
        if not fields:
            return None
        try:
            return cls(**fields)
        except SpecError as exc:
            raise SpecError(f"containers.{exc.field}", raw[exc.field], exc.problem, exc.fix) from None  # as written

    def to_fields(self) -> dict[str, int]:
        """The section as spec-file fields (bytes), only those that differ from the defaults."""
        out = {}
        if self.shm_size != DEFAULT_SHM_SIZE_BYTES:
            out["shm_size"] = self.shm_size
        if self.memory is not None:
            out["memory"] = self.memory
        return out
