"""What explains a failed attempt: its logs, its error file, its memory, its peers.

The supervision loop hands a failed attempt here and gets back a frozen
:class:`~orchestrator.supervisor.records.states.Failure`; nothing here acts on a process. Host facts
(the node's memory, whether the OOM killer struck) come from the backend that ran the task,
so a Slurm node's or a container's limit is used, not the orchestrator host's.
"""

from __future__ import annotations

import json
import re
import signal
import time
from collections import deque
from pathlib import Path
from typing import BinaryIO, Mapping, Sequence

from orchestrator.env import LEFT_BEHIND_FILE, SIGTERM_RECEIVED_FILE, TRAINING
from orchestrator.rundir import STACKS_FILE
from orchestrator.supervisor.records.states import Failure, TaskRuntime
from orchestrator.supervisor.rules import decisions, gpu, stack_rules

_TF_NOISE = re.compile(
    r"^([IW]\d{4} [\d:.]+ +\d+ \S+:\d+\]|E\d{4} [\d:.]+ +\d+ cuda_\w+\.cc:\d+\]|WARNING: All log messages before absl)"
)
_EXCEPTION_HEADER = re.compile(r"^(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*)(?::(?: .*)?)?$")
"""The first line of the exception a traceback ends in: ``[module.]Name[: message]``."""
_LOG_LINE = re.compile(
    r"^(?:[IWEF]\d{4} [\d:.]+ +\d+ \S+:\d+\]"  # absl / glog: TF's C++ lines, absl's Python ones
    r"|(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: )?[IWEF] \S+:\d+\]"  # TF's older C++ format
    r"|WARNING: All log messages before absl"
    r"|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]*:)"  # Python logging's default format (absl, tensorflow)
)
"""A log record's line (never part of a traceback, wherever it lands in one)."""
TRACEBACK = "Traceback (most recent call last):"
_SIDE_TRACEBACKS = ("Exception ignored in", "Exception in thread")
"""What precedes a traceback that did not end the program (unraisable hook, a thread's excepthook)."""
_MESSAGE_END = (TRACEBACK, "During handling of the above exception", "The above exception was the direct cause",
                *_SIDE_TRACEBACKS)
SCAN_BYTES = 64 * 2**20
"""How far back from its end a stderr log is searched for the last traceback."""
MESSAGE_BYTES = 64 * 1024
"""At most this much of an exception's message is kept (a TF message runs to kilobytes)."""
MAX_TRACEBACKS = 32
"""At most this many tracebacks are read, from the last back (a log full of ignored exceptions)."""
TRACEBACK_BYTES = 256 * 1024
"""How much of a log is read from a ``Traceback`` line on: its frames, then its message."""


def tail_lines(path: Path | str | None, lines: int = 20, max_bytes: int = 64 * 1024) -> str:
    """The last ``lines`` lines of a text file ("" when it does not exist).

    TensorFlow's INFO and WARNING lines (``I0000 00:00:...``) are left out, so the
    traceback or error that explains a failure is what remains; the log keeps them all.
    """
    if path is None:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(deque((ln for ln in data.splitlines() if not _TF_NOISE.match(ln)), maxlen=lines))


def error_message(error_file: Path | None) -> str:
    """The ``message`` of a task's JSON error file ("" when there is none)."""
    if error_file is None:
        return ""
    try:
        return str(json.loads(error_file.read_text(encoding="utf-8")).get("message", ""))
    except (OSError, ValueError, AttributeError):
        return ""


def exception_line(stderr_tail: str) -> str:
    """The exception a Python program died of, from its stderr text: :func:`traceback_exception`
    of its last ``Traceback`` (one a thread's excepthook or the unraisable hook printed only
    when there is no other); "" when there is none."""
    lines = stderr_tail.splitlines()
    starts = [i for i, ln in enumerate(lines) if ln.startswith(TRACEBACK)]
    fallback = ""
    for i in reversed(starts):
        found = traceback_exception(lines[i:])
        if found and not (i > 0 and lines[i - 1].startswith(_SIDE_TRACEBACKS)):
            return found
        fallback = fallback or found
    return fallback


def traceback_exception(lines: Sequence[str]) -> str:
    """The exception a printed traceback ends in: its first line with the module path dropped
    (``InvalidArgumentError: Graph execution error:``) and the lines of a multi-line message,
    however long (at most :data:`MESSAGE_BYTES`); "" when ``lines`` (from the ``Traceback``
    line on) has none. Log records (TensorFlow's C++ and absl lines, Python logging's) are
    skipped wherever they land, and end the message: whatever a program logs after its
    traceback is not part of it."""
    i = 1
    while i < len(lines) and (lines[i].startswith((" ", "\t")) or not lines[i].strip() or _LOG_LINE.match(lines[i])):
        i += 1  # the frames ("  File ...", their source lines, carets, "[Previous line repeated ...]"), and logs
    m = _EXCEPTION_HEADER.match(lines[i].rstrip()) if i < len(lines) else None
    if m is None:
        return ""
    message = [lines[i].rstrip()[m.start(1):]]
    size = len(message[0])
    for line in lines[i + 1:]:
        if _LOG_LINE.match(line) or line.startswith(_MESSAGE_END) or size > MESSAGE_BYTES:
            break
        message.append(line.rstrip())
        size += len(line) + 1
    while len(message) > 1 and not message[-1].strip():
        message.pop()
    return "\n".join(message)[:MESSAGE_BYTES]


def last_exception(path: Path | str | None, scan_bytes: int = SCAN_BYTES, chunk_bytes: int = 2**20,
                   max_tracebacks: int = MAX_TRACEBACKS) -> str:
    """The exception a program died of, from its whole stderr log (:func:`exception_line`),
    whatever its length and however much was logged after it: the log is searched backwards
    from its end (at most ``scan_bytes``, ``chunk_bytes`` at a time) for the last ``Traceback``
    line, and read forward from there (at most ``max_tracebacks`` of them, when the last ones
    were printed for a thread or an ignored exception). "" when there is none or the file cannot
    be read."""
    if path is None:
        return ""
    marker = b"\n" + TRACEBACK.encode()
    fallback, seen = "", set[int]()
    try:
        with open(path, "rb") as fh:
            pos = fh.seek(0, 2)
            stop = max(0, pos - scan_bytes)
            while pos > stop:
                base = max(0, max(stop, pos - chunk_bytes) - 1)  # one byte before: its newline
                fh.seek(base)
                data = fh.read(pos + len(marker) - base)
                if base == 0:
                    data, base = b"\n" + data, -1  # the file's first line starts after a virtual newline
                hit = data.rfind(marker)
                while hit >= 0:
                    line_at = base + hit + 1  # where the Traceback line starts in the file
                    if line_at not in seen:  # (chunks overlap by a marker's length)
                        seen.add(line_at)
                        if len(seen) > max_tracebacks:
                            return fallback
                        found, side = _exception_at(fh, line_at)
                        if found and not side:
                            return found
                        fallback = fallback or found
                    hit = data.rfind(marker, 0, hit)
                pos = base + 1
    except OSError:
        return fallback
    return fallback


def _exception_at(fh: BinaryIO, line_at: int) -> tuple[str, bool]:
    """:func:`traceback_exception` of the traceback at byte ``line_at`` of ``fh``, and whether
    a thread's excepthook or the unraisable hook printed it (the line before it says so)."""
    fh.seek(max(0, line_at - 4096))
    before = fh.read(line_at - max(0, line_at - 4096)).decode("utf-8", errors="replace").splitlines()
    text = fh.read(TRACEBACK_BYTES + MESSAGE_BYTES).decode("utf-8", errors="replace")
    return traceback_exception(text.splitlines()), bool(before) and before[-1].startswith(_SIDE_TRACEBACKS)


def sigterm_received(rt: TaskRuntime) -> bool:
    """The task's current attempt wrote :data:`orchestrator.env.SIGTERM_RECEIVED_FILE`
    (its runtime got a SIGTERM from outside: a preemption notice)."""
    path = rt.current.stdout_path
    return path is not None and (Path(path).parent / SIGTERM_RECEIVED_FILE).exists()


def take_left_behind(rt: TaskRuntime) -> str:
    """Read what the ended attempt of ``rt`` left behind (:data:`orchestrator.env.LEFT_BEHIND_FILE`,
    written by its wrapper or the local backend) into ``rt.left_behind``; the event to show, or ""."""
    path = rt.current.stdout_path
    if path is None:
        return ""
    try:
        lines = (Path(path).parent / LEFT_BEHIND_FILE).read_text(encoding="utf-8").splitlines()
    except OSError:
        return ""
    ended = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry not in ended:
            ended.append({**entry, "attempt": rt.current.number})
    rt.left_behind += [e for e in ended if e not in rt.left_behind]
    return f"{rt.task.name}: {left_behind_text(ended)}" if ended else ""


def left_behind_text(ended: Sequence[Mapping[str, object]]) -> str:
    """``ended 1 process the task left behind (pid 123: python -m daemon)``."""
    n = len(ended)
    listed = ", ".join(f"pid {e.get('pid')}: {e.get('cmdline', '')}" for e in ended)
    return f"ended {n} process{'es' if n != 1 else ''} the task left behind ({listed})"


def all_got_sigterm(tasks: Sequence[TaskRuntime]) -> bool:
    """Every started task of a job of several got SIGTERM from outside: the job itself is
    being preempted (Slurm signals every job step at once, before the batch shell)."""
    started = [rt for rt in tasks if rt.current.process is not None]
    return len(tasks) > 1 and len(started) == len(tasks) and all(sigterm_received(rt) for rt in started)


def preemption_cause(rt: TaskRuntime, tasks: Sequence[TaskRuntime]) -> tuple[str, bool]:
    """Why ``rt`` exited preempted, and whether it received the SIGTERM itself: every MWMS
    worker saves and exits when one is preempted (TF's ``PreemptionCheckpointHandler``), so
    the marker :data:`orchestrator.env.SIGTERM_RECEIVED_FILE` in a task's directory names
    the one that was."""
    if sigterm_received(rt):
        return "received SIGTERM from outside (a preemption notice)", True
    peers = [o.task.name for o in tasks if o is not rt and o.current.process is not None and sigterm_received(o)]
    if peers:
        return f"{', '.join(peers)} received SIGTERM from outside; every worker saved and exited", False
    return "", False


def _culprit(rt: TaskRuntime, tasks: Sequence[TaskRuntime], now: float) -> str:
    """With a peer error: the training task that stopped progressing first, and why."""
    others = [o for o in tasks if o is not rt and o.task.task_type != "evaluator" and o.current.process is not None]
    name = decisions.likely_culprit([(o.task.name, o.current.last_step, o.current.progress_at) for o in others])
    if not name:
        return ""
    o = next(o for o in others if o.task.name == name).current
    since = f", no progress for {now - o.progress_at:.1f} s" if o.progress_at is not None else ""
    return f"{name} (last step {o.last_step if o.last_step is not None else '-'}{since})"


def _memory_note(rt: TaskRuntime, oom: bool | None, total: int | None) -> tuple[str, bool]:
    """After a SIGKILL the orchestrator did not send: the peak RSS, and whether the OOM killer
    (the cgroup's count ``oom``, or an RSS near the node's memory ``total`` as the backend knows
    it) likely did it."""
    attempt = rt.current
    near_limit = attempt.peak_rss_bytes is not None and total is not None and attempt.peak_rss_bytes > 0.9 * total
    likely_oom = bool(oom) or near_limit
    parts = []
    if attempt.peak_rss_bytes:
        parts.append(f"peak RSS {attempt.peak_rss_bytes / 2**20:.0f} MiB")
    if likely_oom:
        parts.append("likely killed for memory (" + ("the cgroup counted an OOM kill" if oom
                     else "its RSS was near the machine's memory") + ")")
    elif oom is False:  # the cgroup was read: no OOM kill, so the SIGKILL came from outside
        parts.append("not the OOM killer (no OOM kill counted)")
    return "; ".join(parts), likely_oom


def gpu_oom_of(rt: TaskRuntime, text: str) -> tuple[str, dict[str, object]] | None:
    """The words and the record of a GPU out-of-memory that ``text`` (the error and stderr tail
    of ``rt``'s current attempt) reports (:mod:`orchestrator.supervisor.rules.gpu`), or None: the
    device is the task's (its plan's devices, in ``CUDA_VISIBLE_DEVICES`` order), its memory the
    attempt's last sample, the hint the built-in program's ``--batch-size`` or the program's own."""
    oom = gpu.gpu_oom(text)
    if oom is None:
        return None
    attempt = rt.current
    usages = gpu.usages_of(attempt.heartbeat.heartbeat) if attempt.heartbeat is not None else ()
    usages = usages or (attempt.sample.gpus if attempt.sample is not None else ())
    usage = gpu.device_usage(oom, [g.uuid for g in rt.plan.gpus.devices], usages)
    training = json.loads(rt.plan.env.get(TRAINING, "{}") or "{}")
    hint = gpu.batch_hint(rt.plan.reports_heartbeats, int(training.get("batch_size_per_replica", 0)))
    return gpu.describe(oom, usage, hint), gpu.gpu_oom_dict(oom, usage, hint)


def memory_facts_needed(code: int | None, killed: bool) -> bool:
    """Whether :func:`explain_failure` needs the backend's memory facts: a SIGKILL the
    orchestrator did not send."""
    return code == -signal.SIGKILL and not killed


def explain_failure(rt: TaskRuntime, tasks: Sequence[TaskRuntime], memory: tuple[bool | None, int | None] | None, *,
                    code: int | None, now: float, message: str, killed: bool = False,
                    preemption_notice: bool = False) -> Failure:
    """The failure record of ``rt``'s current attempt with what explains it: the exception line
    (the error file's, else the stderr log's: :func:`last_exception`), a GPU out-of-memory (:func:`gpu_oom_of`: then no
    peer error), a peer error and the likely culprit, the peak RSS and whether it was likely
    killed for memory.

    Args:
        rt: the failed task (its current attempt ended with ``code``).
        tasks: every task of the job (for peers).
        memory: what the backend that ran it knows, when :func:`memory_facts_needed`: whether
            the OOM killer struck (None: it cannot tell) and the node's memory in bytes (None: unknown).
        code: Popen return code (negative: signal), None when unknown.
        now: orchestrator monotonic seconds.
        message: what the loop already knows ("" to look in the logs).
        killed: the orchestrator itself killed it (so a SIGKILL says nothing of memory).
        preemption_notice: it received the SIGTERM from outside itself.
    """
    attempt = rt.current
    tail = tail_lines(attempt.stderr_path)
    from_log = not message
    if from_log:  # the whole log: a TF traceback is longer than the tail, and its message kilobytes long
        message = last_exception(attempt.stderr_path)
    exception = message if from_log else error_message(attempt.error_file)  # before notes are added to it
    oom = gpu_oom_of(rt, message + "\n" + tail)
    if oom is not None:  # its own root cause: a retry would run out the same way
        message = f"{message}; {oom[0]}" if message else oom[0]
    peer = "" if oom is not None else decisions.peer_error(message + "\n" + tail)
    culprit = _culprit(rt, tasks, now) if peer else ""
    likely_oom = False
    if memory_facts_needed(code, killed) and memory is not None:
        note, likely_oom = _memory_note(rt, *memory)
        if note:
            message = f"{message}; {note}" if message else note
    if killed or code is None or code < 0 or peer or preemption_notice or oom is not None:
        exception = ""  # a kill, a hang, a peer's consequence: no error of its own to compare
    return Failure(
        task=rt.task,
        attempt=attempt.number,
        exit_code=code,
        at=now,
        wall_time=time.time(),
        message=message,
        stderr_tail=tail,
        log_path=str(attempt.stderr_path),
        peer_error=peer,
        likely_culprit=culprit,
        peak_rss_bytes=attempt.peak_rss_bytes,
        likely_oom=likely_oom,
        preemption_notice=preemption_notice,
        gpu_oom=oom[1] if oom is not None else None,
        exception=exception,
    )


def hang_message(rt: TaskRuntime, why: str, dump: str) -> str:
    """The failure message of a hung task: ``hung: <why>``, where its main thread is stuck (from
    its stack dump: :func:`~orchestrator.supervisor.rules.stack_rules.stuck_line`), and the path of the
    dump, kept in ``stacks.txt`` (:func:`keep_stacks`)."""
    where, stacks = stack_rules.stuck_line(rt.task.name, dump), keep_stacks(rt, dump)
    return f"hung: {why}" + (f"; {where}" if where else "") + (f"; stack dump in {stacks}" if stacks else "")


def keep_stacks(rt: TaskRuntime, dump: str) -> str:
    """Keep a hung attempt's stack dump in ``stacks.txt`` beside its logs; returns that path
    ("" when there is no dump or it cannot be written)."""
    if not dump or rt.current.stderr_path is None:
        return ""
    target = rt.current.stderr_path.parent / STACKS_FILE
    try:
        target.write_text(dump, encoding="utf-8")
    except OSError:
        return ""
    return str(target)
