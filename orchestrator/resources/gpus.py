"""The GPUs of this node, behind one small interface: what there is, and how busy each one is.

Both sides read it: the control plane to place tasks on devices (:mod:`orchestrator.resources.placement`)
and for ``doctor``; the task side's heartbeat reporter to sample the devices its task holds.

* :func:`discover` -> :class:`Inventory`: every GPU of the node (index, UUID, name, memory) and
  the driver version, through NVML (``nvidia-ml-py``, the optional extra ``gpu``, imported only
  here and only when called). NVML missing, no driver, or no GPU is an empty inventory with the
  reason in :attr:`Inventory.problem`, never an error: a CPU node is a normal node.
* :func:`sample` -> :class:`GpuUsage` per device: utilisation (percent, NVML's
  ``nvmlDeviceGetUtilizationRates``: the share of the last sample period a kernel ran) and
  device memory used / total (``nvmlDeviceGetMemoryInfo``). These are device-wide figures:
  with one task per device (the default) they are the task's own.
* A fake inventory of our own for tests and for machines without NVML: ``ORCH_FAKE_GPUS``
  (:data:`FAKE_ENV`) names a JSON file holding a list of GPUs, each
  ``{"uuid", "name", "memory_total_bytes", "memory_used_bytes"?, "utilization_percent"?}``
  (``index`` defaults to the position). Both :func:`discover` and :func:`sample` then read it
  instead of NVML; task processes inherit the variable, so their heartbeats carry it too. A GPU
  in MIG mode lists its instances under ``"mig"``, each ``{"uuid": "MIG-...", "name"?,
  "memory_total_bytes", "memory_used_bytes"?, "utilization_percent"?}``.
* **MIG**: a GPU in MIG mode (``nvmlDeviceGetMigMode``) is not dealt whole: the inventory lists
  its MIG instances instead (``nvmlDeviceGetMigDeviceHandleByIndex``), each a :class:`Gpu` named
  by its ``MIG-`` UUID (what ``CUDA_VISIBLE_DEVICES`` takes for an instance; CUDA sees one
  instance per process), with its parent's index and UUID in :attr:`Gpu.parent`.

Devices are named by UUID (``GPU-8f3c...``) wherever they are assigned: ``CUDA_VISIBLE_DEVICES``
accepts UUIDs, and unlike indices they cannot shift when another process (or a container
runtime) enumerates the devices in another order.
"""

from __future__ import annotations

import ctypes
import functools
import json
import logging
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator import env

log = logging.getLogger(__name__)

FAKE_ENV = env.FAKE_GPUS
"""Path of a JSON list of fake GPUs (tests, demos); when set, NVML is not asked."""

UUID_PREFIXES = ("GPU-", "MIG-")
"""How a whole GPU's UUID and a MIG instance's begin (``nvidia-smi -L``)."""

VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"
"""CUDA's own variable: the devices a process may use (UUIDs or indices, comma-separated)."""


@dataclass(frozen=True)
class Gpu:
    """One device of the node.

    Attributes:
        index: NVML's index (the order ``nvidia-smi`` lists).
        uuid: ``GPU-...``: what ``CUDA_VISIBLE_DEVICES`` and Docker's device requests name.
        name: the product name, e.g. ``NVIDIA H100 80GB HBM3``.
        memory_total_bytes: device memory.
        parent: for a MIG instance, its GPU's UUID ("" for a whole GPU).
    """

    index: int
    uuid: str
    name: str
    memory_total_bytes: int
    parent: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "uuid": self.uuid, "name": self.name,
                "memory_total_bytes": self.memory_total_bytes}

    def describe(self) -> str:
        """``0: NVIDIA H100 80GB HBM3 (80 GiB, GPU-8f3c...)``; a MIG instance: ``0: NVIDIA A100 MIG 1g.10gb
        (10 GiB, MIG-...)``."""
        return f"{self.index}: {self.name} ({self.memory_total_bytes / 2**30:.0f} GiB, {self.uuid})"


@dataclass(frozen=True)
class GpuUsage:
    """One device, sampled now.

    Attributes:
        uuid: the device.
        index: NVML's index.
        utilization_percent: share of the last sample period a kernel ran, 0-100.
        memory_used_bytes: device memory in use (every process on it).
        memory_total_bytes: device memory.
    """

    uuid: str
    index: int
    utilization_percent: float
    memory_used_bytes: int
    memory_total_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return {"uuid": self.uuid, "index": self.index, "utilization_percent": self.utilization_percent,
                "memory_used_bytes": self.memory_used_bytes, "memory_total_bytes": self.memory_total_bytes}


@dataclass(frozen=True)
class Inventory:
    """What :func:`discover` found.

    Attributes:
        gpus: the devices, by index.
        driver: the driver version (``550.54.15``), "" when unknown.
        source: ``nvml`` or ``fake:<path>``, "" when nothing answered.
        problem: why there are none ("" when there are): ``nvidia-ml-py is not installed``,
            ``NVML: NVML Shared Library Not Found`` (no driver), ``no GPU``.
    """

    gpus: tuple[Gpu, ...] = ()
    driver: str = ""
    source: str = ""
    problem: str = ""

    def describe(self) -> str:
        """One line: ``1 GPU (driver 550.54): 0: NVIDIA H200 (...)`` or ``no GPU was found (...)``."""
        if not self.gpus:
            return f"no GPU was found ({self.problem})" if self.problem else "no GPU was found"
        driver = f", driver {self.driver}" if self.driver else ""
        count = f"{len(self.gpus)} GPU" + ("s" if len(self.gpus) != 1 else "")
        return f"{count} ({self.source}{driver}): " + "; ".join(g.describe() for g in self.gpus)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _fake_entries(path: str) -> list[dict[str, Any]]:
    raw = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(raw, list):
        raise TypeError(f"{FAKE_ENV}={path}: expected a JSON list of GPUs")
    return [dict(e) for e in raw]


def _fake_devices(entries: list[dict[str, Any]]) -> Iterable[tuple[int, dict[str, Any], str]]:
    """(index, entry, parent UUID) of every device a fake inventory deals: a GPU's MIG instances
    (its ``"mig"`` list) instead of the GPU."""
    for i, e in enumerate(entries):
        index = int(e.get("index", i))
        if e.get("mig"):
            for m in e["mig"]:
                yield index, {"name": f"{e.get('name', 'fake GPU')} MIG", **dict(m)}, str(e["uuid"])
        else:
            yield index, e, ""


def _fake_inventory(path: str) -> Inventory:
    try:
        entries = _fake_entries(path)
        gpus = tuple(Gpu(i, str(e["uuid"]), str(e.get("name", "fake GPU")), int(e["memory_total_bytes"]), parent)
                     for i, e, parent in _fake_devices(entries))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return Inventory(source=f"fake:{path}", problem=f"{FAKE_ENV}: {exc}")
    return Inventory(gpus, "fake", f"fake:{path}", "" if gpus else "no GPU")


_NVML_LOCK = threading.Lock()
_nvml_ready: list[bool] = []


def _pynvml() -> Any:
    """The ``pynvml`` module (the optional extra ``gpu``: nvidia-ml-py). Raises ImportError."""
    import pynvml

    return pynvml


def _nvml() -> Any:
    """The initialised ``pynvml`` module. Raises ImportError or ``pynvml.NVMLError``."""
    pynvml = _pynvml()
    with _NVML_LOCK:
        if not _nvml_ready:
            pynvml.nvmlInit()
            _nvml_ready.append(True)
    return pynvml


@functools.lru_cache(maxsize=1)
def _no_nvml_library() -> str:
    """Why NVML cannot load here ("" when it can): the driver's ``libnvidia-ml.so.1``, which
    ``pynvml`` loads (its ``_LoadNvmlLibrary``), asked of the dynamic loader first, so a node
    without a driver never imports ``pynvml`` (~20-60 ms of CPU, on a launch's path before its
    first task starts and in every task's heartbeat thread). Other platforms: ask ``pynvml``."""
    if not sys.platform.startswith("linux"):
        return ""
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return "NVML Shared Library Not Found"
    return ""


def _nvml_inventory() -> Inventory:
    if _no_nvml_library():
        return Inventory(problem=f"NVML: {_no_nvml_library()}")
    try:
        errors = _pynvml().NVMLError
    except ImportError:
        return Inventory(problem="nvidia-ml-py is not installed: pip install 'tf-cluster-orchestrator[gpu]'")
    try:
        nvml = _nvml()
    except errors as exc:  # no driver, no library
        return Inventory(problem=f"NVML: {exc}")
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        gpus = []
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            whole = Gpu(i, _text(nvml.nvmlDeviceGetUUID(handle)), _text(nvml.nvmlDeviceGetName(handle)),
                        int(nvml.nvmlDeviceGetMemoryInfo(handle).total))
            gpus.extend(_mig_instances(nvml, handle, whole) or [whole])
    except errors as exc:
        return Inventory(source="nvml", problem=f"NVML: {exc}")
    return Inventory(tuple(gpus), driver, "nvml", "" if gpus else "no GPU")


def _mig_instances(nvml: Any, handle: Any, parent: Gpu) -> list[Gpu]:
    """The MIG instances of a GPU in MIG mode ([] when it is not, or NVML cannot say)."""
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
        if current != nvml.NVML_DEVICE_MIG_ENABLE:
            return []
        count = int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))
    except nvml.NVMLError:  # not a MIG-capable GPU (NOT_SUPPORTED), or an old driver
        return []
    out = []
    for j in range(count):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, j)
            out.append(Gpu(parent.index, _text(nvml.nvmlDeviceGetUUID(mig)), _text(nvml.nvmlDeviceGetName(mig)),
                           int(nvml.nvmlDeviceGetMemoryInfo(mig).total), parent.uuid))
        except nvml.NVMLError:  # no instance in this slot
            continue
    return out


def discover() -> Inventory:
    """The GPUs of this node: the fake inventory when :data:`FAKE_ENV` is set, else NVML's.

    Never raises: whatever stops NVML from answering becomes :attr:`Inventory.problem`.
    Cached per process and per fake file (a node's devices do not change under a job).
    """
    return _discover(env.read(FAKE_ENV))


@functools.lru_cache(maxsize=8)
def _discover(fake: str) -> Inventory:
    return _fake_inventory(fake) if fake else _nvml_inventory()


def visible(value: str | None, inventory: Inventory) -> tuple[Gpu, ...]:
    """The devices a ``CUDA_VISIBLE_DEVICES`` value names, of ``inventory``.

    UUIDs (``GPU-...`` or a MIG instance's ``MIG-...``, also a unique prefix, as CUDA takes them) or
    indices; CUDA stops at the first entry it cannot resolve, and so does this. None (unset): every device; "": none.
    """
    if value is None:
        return inventory.gpus
    out: list[Gpu] = []
    for item in (v.strip() for v in value.split(",")):
        match = [g for g in inventory.gpus if (g.uuid.startswith(item) if item.startswith(UUID_PREFIXES)
                                               else item.isdigit() and g.index == int(item) and not g.parent)]
        if len(match) != 1:
            break
        out.append(match[0])
    return tuple(out)


def uuids_in(value: str | None) -> tuple[str, ...]:
    """The device UUIDs a ``CUDA_VISIBLE_DEVICES`` value names (what the orchestrator assigns);
    indices and an unset value name none here."""
    return tuple(v.strip() for v in (value or "").split(",") if v.strip().startswith(UUID_PREFIXES))


def sample(uuids: Iterable[str]) -> tuple[GpuUsage, ...]:
    """Utilisation and memory of the devices ``uuids``, now; a device that does not answer is
    left out, and no NVML at all is ``()``. Never raises (the heartbeat thread calls it)."""
    wanted = list(uuids)
    if not wanted:
        return ()
    fake = env.read(FAKE_ENV)
    if fake:
        try:
            entries = {str(e["uuid"]): (i, e) for i, e, _ in _fake_devices(_fake_entries(fake))}
        except (OSError, ValueError, KeyError, TypeError):
            return ()
        return tuple(
            GpuUsage(u, int(e.get("index", i)), float(e.get("utilization_percent", 0.0)),
                     int(e.get("memory_used_bytes", 0)), int(e["memory_total_bytes"]))
            for u in wanted if u in entries for i, e in [entries[u]])
    if _no_nvml_library():
        return ()
    try:
        errors = _pynvml().NVMLError
        nvml = _nvml()
    except ImportError:
        return ()
    except errors:  # no NVML here
        return ()
    out = []
    for uuid in wanted:
        try:
            handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            try:
                percent = float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            except errors:  # a MIG instance has no utilisation of its own (NOT_SUPPORTED)
                percent = 0.0
            if uuid.startswith("MIG-"):  # a MIG instance: its GPU's index
                handle = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
            index = int(nvml.nvmlDeviceGetIndex(handle))
            out.append(GpuUsage(uuid, index, percent, int(memory.used), int(memory.total)))
        except errors as exc:  # the device went away, or no permission
            log.debug("NVML: no sample of %s: %s", uuid, exc)
    return tuple(out)


def sample_visible(environ: Mapping[str, str] | None = None) -> tuple[GpuUsage, ...]:
    """:func:`sample` of the devices this process may use (its ``CUDA_VISIBLE_DEVICES``,
    from ``environ``, default ``os.environ``; unset: every device NVML sees)."""
    value = env.read(VISIBLE_ENV, environ=environ) if env.read(VISIBLE_ENV, "<unset>", environ) != "<unset>" else None
    return sample(g.uuid for g in visible(value, discover()))


def peak_memory(samples: Sequence[GpuUsage]) -> int:
    """Memory used on all of ``samples`` together, bytes (a task's GPU memory at one moment)."""
    return sum(s.memory_used_bytes for s in samples)
