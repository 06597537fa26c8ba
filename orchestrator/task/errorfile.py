"""Errors cross processes as JSON error files (torch.distributed.elastic's ``@record``): an uncaught
exception of a task is written (message, type, traceback, timestamp) where the orchestrator reads
it to name the root cause."""

from __future__ import annotations

import json
import os
import time
import traceback
from typing import Callable, TypeVar

from orchestrator.task.context import TaskContext

_T = TypeVar("_T")


def write_error_file(path: str, exc: BaseException, task: str = "") -> None:
    """Write the JSON error record of ``exc`` to ``path`` (no-op when ``path`` is empty).

    The record: ``{"message", "type", "traceback", "timestamp" (Unix seconds), "pid", "task"}``.
    """
    if not path:
        return
    record = {
        "message": f"{type(exc).__name__}: {exc}",
        "type": type(exc).__name__,
        "traceback": "".join(traceback.format_exception(exc)),
        "timestamp": time.time(),
        "pid": os.getpid(),
        "task": task,
    }
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(record, fh, indent=2)
    os.replace(tmp, path)


def record_errors(context: TaskContext, fn: Callable[[], _T]) -> _T:
    """Run ``fn``; on an uncaught exception write the error file, then re-raise."""
    try:
        return fn()
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - recorded, then re-raised
        write_error_file(context.error_file, exc, context.name)
        raise
