"""Preemption -> training resumed, with real TensorFlow (issue 18): one SIGTERM to the orchestrator,
then ``launch --resume`` started at once.

One job (MWMS 2 workers, the built-in program on digits) gives both sides of the ratio:

1. ``launch``: its launch -> first step is the cold start (the ``first_step`` rows' measure,
   worker-0's ``bench: first step`` mark, ``worker/progress.py``).
2. Once worker-0's stdout shows tf-keras ``Epoch {epoch}/`` (an epoch done, more to come: the
   signal lands mid-training by construction), the bench SIGTERMs the orchestrator: save and leave.
   The job must end ``Preempted`` (exit 75).
3. At once ``launch --resume RUN_ID``; preemption -> training resumed is the SIGTERM -> the
   ``bench: first step`` mark of worker-0's first attempt of the new life (the attempt number the
   first life left in ``run.json``), and ``steps_lost`` is ``summary.json`` ``lives[0].steps_lost``;
   the new life's ``resumed_from_step`` is checked against the step the workers logged their
   preemption checkpoint at.
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

from bench.stats import ratios, summarize
from bench.tfjobs import ORCHESTRATOR, RunResult, TaskLog, run_orchestrated

EXIT_PREEMPTED = 75  # orchestrator.supervisor.records.states.EXIT_PREEMPTED (the bench imports no control plane)
SIGNAL_AT_EPOCH = 2
_SAVED = re.compile(r"checkpoint saved after step (\d+)")
_MARK = re.compile(r"bench: mark (\w+) \(unix ([\d.]+)\)")


def launch_args(epochs: int) -> list[str]:
    """The job: MWMS 2 workers, built-in program, ``epochs`` epochs, no warm spares (a resumed
    life is a new orchestrator: it starts every task cold whatever ``--spares`` says)."""
    return ["--workers", "2", "--epochs", str(epochs), "--spares", "0"]


def once_in_epoch(epoch: int = SIGNAL_AT_EPOCH):
    """A ``kill_when`` for :func:`~bench.tfjobs.run_orchestrated`: the orchestrator, once worker-0's
    first attempt printed ``Epoch {epoch}/``."""
    def when(run_dir: Path, events) -> str | None:
        out = run_dir / "attempt-0" / "worker-0" / "stdout.log"
        return ORCHESTRATOR if out.exists() and f"Epoch {epoch}/" in out.read_text(errors="replace") else None

    return when


def saved_steps(run_dir: Path, attempt: int = 0) -> dict[str, int | None]:
    """Per worker of attempt ``attempt``: the step its preemption checkpoint was saved after (None: no save logged)."""
    steps: dict[str, int | None] = {}
    for out in sorted(run_dir.glob(f"attempt-{attempt}/worker-*/stdout.log")):
        m = _SAVED.search(out.read_text(errors="replace"))
        steps[out.parent.name] = int(m[1]) if m else None
    return steps


def section(suite, log) -> None:
    """The ``preemption`` section of :class:`bench.run.Suite`: ``runs`` preemptions (1 with
    ``--quick``), each its own job; rows ``preemption_to_resumed_over_cold_start`` (each run's
    ratio over its own cold start), the two times it divides, and ``steps_lost_per_preemption``.
    A resume that did not start from the step the workers saved at is an error of the suite."""
    runs, epochs = (1, 3) if suite.quick else (5, 4)
    done = []
    for _ in range(runs):
        m = measure(suite.workdir, suite._id("preempt"), epochs)
        if "incomplete" not in m and not m["cold_start_s"]:
            m.update(incomplete="no first-step mark in the first life", tail="")
        if "incomplete" in m:
            log(f"preemption run {m['run']}: incomplete: {m.pop('incomplete')}{m.pop('tail')}")
            continue
        done.append(m)
        log(f"preemption: SIGTERM -> resumed {m['preemption_to_resumed_s']:.2f} s (SIGTERM -> exit 75 "
            f"{m['sigterm_to_exit_s']:.2f} s), cold start {m['cold_start_s']:.2f} s, ratio "
            f"{m['preemption_to_resumed_s'] / m['cold_start_s']:.3f}; saved after step {m['saved_step']}, resumed "
            f"from {m['resumed_from_step']}, lost {m['steps_lost']}")
        if not m["resumed_from_saved_step"]:
            suite.errors.append(f"section preemption: run {m['run']} resumed from step {m['resumed_from_step']}, "
                                f"its workers saved after steps {m['saved_after_step']}")
    rec, cold = [m["preemption_to_resumed_s"] for m in done], [m["cold_start_s"] for m in done]
    label = f"MWMS 2 workers, SIGTERM to the orchestrator in epoch {SIGNAL_AT_EPOCH} of {epochs}, --resume at once"
    suite.add("10", "preemption_to_resumed_over_cold_start",
              f"preemption -> training resumed / cold launch -> first step, {label}", "ratio", ratios(rec, cold), None,
              {"preemption_to_resumed_s": summarize(rec), "cold_start_s": summarize(cold),
               "sigterm_to_exit_s": summarize(m["sigterm_to_exit_s"] for m in done),
               "exit_to_resume_launch_s": summarize(m["exit_to_resume_launch_s"] for m in done),
               "resume_launch_to_first_step_s": summarize(m["resume_launch_to_first_step_s"] for m in done),
               "command": "launch --plain " + " ".join(launch_args(epochs)) + "; SIGTERM; launch --resume RUN_ID",
               "runs": done})
    suite.add("10", "preemption_to_resumed_s", f"preemption (SIGTERM) -> training resumed, {label}", "s", rec)
    suite.add("10", "preemption_cold_start_s", f"cold launch -> first step of the same job, {label}", "s", cold)
    suite.add("10", "steps_lost_per_preemption",
              f"steps lost per preemption (summary.json lives[0].steps_lost), {label}", "steps",
              [m["steps_lost"] for m in done], "<= 0",
              {"resumed_from_saved_step": [m["resumed_from_saved_step"] for m in done],
               "steps_lost_from_logs": [m["steps_lost_from_logs"] for m in done],
               "first_life_last_step_reported": [m["first_life_last_step"] for m in done],
               "saved_after_step": [m["saved_step"] for m in done]})


def phases(out: Path, since_unix: float) -> dict[str, float]:
    """Seconds from ``since_unix`` to each ``bench: mark LABEL`` a task printed (``worker/progress.py``:
    ``train``, ``imported``, ``strategy``, ``data``, ``model``, ``fit``, ``restored``): where a start's time went."""
    try:
        text = out.read_text(errors="replace")
    except OSError:
        return {}
    return {label: round(float(t) - since_unix, 3) for label, t in _MARK.findall(text)}


def measure(workdir: Path, run_id: str, epochs: int) -> dict:
    """One preemption and its resume; the measured values, or ``{"incomplete": why, ...}``."""
    first = run_orchestrated(workdir, run_id, launch_args(epochs), "worker-0", kill_when=once_in_epoch(),
                             kill_signal=signal.SIGTERM)
    exited_at = first.launch_unix + first.wall_s
    out: dict = {"run": run_id, "epochs": epochs, "signal_at_epoch": SIGNAL_AT_EPOCH, "first_exit": first.exit_code,
                 "cold_start_s": first.first_step_s()}
    if first.exit_code != EXIT_PREEMPTED or first.killed_at is None:
        return {**out, "incomplete": f"first life exited {first.exit_code} (want {EXIT_PREEMPTED}), SIGTERM at "
                f"{first.killed_at}", "tail": _tail(first)}
    try:
        attempt = int(json.loads((first.run_dir / "run.json").read_text())["next_attempt"]["worker-0"])
    except (OSError, ValueError, KeyError):
        attempt = 1
    second = run_orchestrated(workdir, run_id, ["--resume", run_id], "worker-0")
    resumed = {w: TaskLog.read(second.run_dir / f"attempt-{attempt}" / w / "stdout.log").first_step
               for w in ("worker-0", "worker-1")}
    lives = (second.summary or {}).get("lives") or []
    saved = saved_steps(first.run_dir)
    out.update({"resume_exit": second.exit_code, "sigterm_to_exit_s": exited_at - first.killed_at,
                "exit_to_resume_launch_s": second.launch_unix - exited_at, "resumed_attempt": attempt,
                "saved_after_step": saved, "lives": lives})
    if second.exit_code != 0 or len(lives) != 2 or resumed["worker-0"] is None:
        return {**out, "incomplete": f"resumed life exited {second.exit_code}, {len(lives)} lives, first step "
                f"{resumed['worker-0']}", "tail": _tail(second)}
    one, two = lives
    steps = set(saved.values())
    saved_step = steps.pop() if len(steps) == 1 else None
    first_step_unix = resumed["worker-0"][1]
    out.update({
        "preemption_to_resumed_s": first_step_unix - first.killed_at,
        "resume_launch_to_first_step_s": first_step_unix - second.launch_unix,
        "preemption_to_last_worker_resumed_s": max(t for _, t in resumed.values() if t) - first.killed_at,
        "steps_lost": one.get("steps_lost"), "first_life": (one.get("ended"), one.get("cause")),
        "resumed_from_step": two.get("resumed_from_step"), "saved_step": saved_step,
        "resumed_from_saved_step": saved_step is not None and two.get("resumed_from_step") == saved_step,
        # the same from the workers' logs: the save is after the last step done. lives[0].last_step is the
        # last step heartbeats reported (up to --heartbeat-interval old), so steps_lost alone can read low
        "steps_lost_from_logs": None if saved_step is None or two.get("resumed_from_step") is None
        else saved_step - two["resumed_from_step"],
        "first_life_last_step": one.get("last_step"),
        "steps": ((second.summary or {}).get("metrics") or {}).get("steps"),
        # worker-0's start, step by step: the first life from its launch, the resumed one from the SIGTERM
        "cold_start_phases_s": phases(first.run_dir / "attempt-0" / "worker-0" / "stdout.log", first.launch_unix),
        "resumed_phases_s": phases(second.run_dir / f"attempt-{attempt}" / "worker-0" / "stdout.log",
                                   first.killed_at),
    })
    return out


def _tail(r: RunResult, lines: int = 12) -> str:
    return "".join(f"\n    | {line}" for _, line in r.events[-lines:])
