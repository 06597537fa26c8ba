"""A planned MWMS resize's pause over a cold start, with real TensorFlow (issue 34, item 7).

One job (``--workers 1:2``, MWMS, the built-in program on digits, warm spares by default) gives both
sides of the ratio:

1. its launch -> first step is the cold start (worker-0's ``bench: first step`` mark);
2. once a warm spare has imported TensorFlow (its ``spares/spare-N.ready`` file: a job that has
   run as long as a start takes, :func:`orchestrator.supervisor.rules.decisions.spares_start_at`)
   and worker-0 is in epoch 2, ``python -m orchestrator resize RUN --workers 1``: every worker saves
   at one step (the preemption's coordinated save), and the group continues at 1 worker in the same
   launcher, its task a warm spare;
3. the pause is the new group's first step (worker-0's ``bench: first step`` mark of its next
   attempt) minus the moment the notice went out (the launcher's ``every worker saves at its next
   step`` event line, timestamped as it arrives): the notice precedes the last step at the old size
   by at most a step, so this reads the pause high by at most a step and the save. ``steps_lost`` is
   ``summary.json`` ``lives[0].steps_lost``. Once the new group has trained its first step the
   bench stops the job (SIGINT): what is measured is over.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from bench.stats import ratios, summarize
from bench.tfjobs import ORCHESTRATOR, PY, REPO, TaskLog, base_env, run_orchestrated

EPOCHS = 60  # a spare must be ready before training ends on loaded cores; the bench stops the job once measured
_NOTICE = "every worker saves at its next step"
_SAVED = re.compile(r"checkpoint saved after step (\d+)")
_MARK = re.compile(r"bench: mark ([\w-]+) \(unix ([\d.]+)\)")


def launch_args() -> list[str]:
    """MWMS, 1 to 2 workers (it starts at 2), warm spares by default (2 for MWMS)."""
    return ["--workers", "1:2", "--epochs", str(EPOCHS)]


def section(suite, log) -> None:
    """The ``resize`` section of :class:`bench.run.Suite`: ``runs`` planned resizes 2 -> 1 (1 with
    ``--quick``); rows ``resize_pause_over_cold_start`` (target <= 0.35), the two times it divides,
    and ``steps_lost_per_resize`` (target 0)."""
    runs = 1 if suite.quick else 3
    done = []
    for _ in range(runs):
        m = measure(suite.workdir, suite._id("resize"))
        if "incomplete" in m:
            log(f"resize run {m['run']}: incomplete: {m.pop('incomplete')}")
            continue
        done.append(m)
        log(f"resize: pause {m['pause_s']:.2f} s, cold start {m['cold_start_s']:.2f} s, ratio "
            f"{m['pause_s'] / m['cold_start_s']:.3f}; saved after step {m['saved_step']}, resumed from "
            f"{m['resumed_from_step']}, lost {m['steps_lost']}; spare used: {m['spare_used']}")
    pause, cold = [m["pause_s"] for m in done], [m["cold_start_s"] for m in done]
    label = "MWMS --workers 1:2, resize RUN --workers 1 in epoch 2 once a spare is ready"
    suite.add("12", "resize_pause_over_cold_start",
              f"planned resize 2 -> 1: last step at 2 -> first step at 1 / cold launch -> first step, {label}",
              "ratio", ratios(pause, cold), "<= 0.35",
              {"pause_s": summarize(pause), "cold_start_s": summarize(cold),
               "command": "launch --plain " + " ".join(launch_args()) + "; resize RUN --workers 1", "runs": done})
    suite.add("12", "resize_pause_s", f"planned resize pause (notice -> first step at the new size), {label}", "s",
              pause)
    suite.add("12", "resize_cold_start_s", f"cold launch -> first step of the same job, {label}", "s", cold)
    suite.add("12", "steps_lost_per_resize", f"steps lost per planned resize (summary.json lives[0].steps_lost), "
              f"{label}", "steps", [m["steps_lost"] for m in done], "<= 0")


def measure(workdir: Path, run_id: str) -> dict:
    """One planned resize; the measured values, or ``{"incomplete": why, ...}``."""
    asked: list[int] = []

    def resize_when(run_dir: Path, events) -> str | None:
        out = run_dir / "attempt-0" / "worker-0" / "stdout.log"
        if asked or not list((run_dir / "spares").glob("*.ready")):
            return None
        if not (out.exists() and "Epoch 2/" in out.read_text(errors="replace")):
            return None
        done = subprocess.run([PY, "-m", "orchestrator", "resize", run_id, "--runs-dir", str(workdir),
                               "--workers", "1"], cwd=REPO, env=base_env(), capture_output=True, text=True,
                              timeout=60)
        asked.append(done.returncode)
        return ORCHESTRATOR  # with signal 0: nothing sent, the time noted

    def resized(run_dir: Path, events) -> bool:
        return TaskLog.read(run_dir / "attempt-1" / "worker-0" / "stdout.log").first_step is not None

    r = run_orchestrated(workdir, run_id, launch_args(), "worker-0", kill_when=resize_when, kill_signal=0,
                         stop_when=resized)
    out: dict = {"run": run_id, "epochs": EPOCHS, "cold_start_s": r.first_step_s(), "resize_exit": asked,
                 "exit": r.exit_code}
    notice = next((t for t, line in r.events if _NOTICE in line), None)
    second = TaskLog.read(r.run_dir / "attempt-1" / "worker-0" / "stdout.log").first_step
    lives = (r.summary or {}).get("lives") or []
    if asked != [0] or notice is None or second is None or len(lives) != 2 or not out["cold_start_s"]:
        return {**out, "incomplete": f"resize exit {asked}, notice {notice}, new group's first step {second}, "
                f"{len(lives)} lives; " + " | ".join(line for _, line in r.events[-8:])}
    saved = {int(m) for p in r.run_dir.glob("attempt-0/worker-*/stdout.log")
             for m in _SAVED.findall(p.read_text(errors="replace"))}
    spares = (r.summary or {}).get("spares") or []
    out.update({"pause_s": second[1] - notice, "steps_lost": lives[0].get("steps_lost"),
                "resumed_from_step": lives[1].get("resumed_from_step"),
                "saved_step": saved.pop() if len(saved) == 1 else sorted(saved),
                "spare_used": any(s.get("task") == "worker-0" for s in spares if isinstance(s, dict)),
                "segments": (r.summary or {}).get("segments"),
                "timeline_s": timeline(r.events, notice, r.run_dir / "attempt-1" / "worker-0" / "stdout.log")})
    return out


def timeline(events, notice: float, task_log: Path) -> dict[str, float]:
    """Where the pause went: seconds from the notice to the orchestrator's marks after it (``life-ended``,
    the next life's ``prepared``, ``health-up``) and to the new task's (``task-main`` ... ``restored``)."""
    out: dict[str, float] = {}
    for _, line in events:
        if (m := _MARK.search(line)) and float(m[2]) >= notice:
            out.setdefault(m[1], round(float(m[2]) - notice, 3))
    try:
        text = task_log.read_text(errors="replace")
    except OSError:
        return out
    for label, t in _MARK.findall(text):
        out.setdefault(f"task {label}", round(float(t) - notice, 3))
    return out
