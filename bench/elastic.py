"""Elastic jobs measured with real TensorFlow (issue 34, item 7): a PSS shrink and a 3 -> 2 -> 3 MWMS run.

``pss_shrink``: one ParameterServerStrategy job (chief, ``--workers 2:3``, 1 ps: it starts at 3) whose
worker 2 is lost mid-training (``--inject-fault worker:2:lose@step=N``: handed over by the chief, the
job's gate, at the job's step N; the worker SIGKILLs itself and its slot stays withdrawn, so it is
parked). The rows: coordinator restarts (``summary.json``: the chief's attempts - 1; target 0) and the
chief's steps/s at 2 workers over 2/3 of its steps/s at 3 in the same run (target >= 1: losing one
worker of three costs at most its third). The rates come from the chief's epoch-end markers
(``bench: epoch E done at step S``): each epoch between two markers is one rate; before the loss,
the epochs that ended before the fault's line (epoch 1, the warm-up, has no marker before it); after
it, the epochs that began after the fault, less the first (the coordinator notices the lost worker and
re-dispatches its closure then). On 2 shared cores the chief, 3 workers and the ps contend for the same
CPU: the rate hardly depends on the worker count there, so the ratio reads about 3/2 and says little
about how PSS scales on real hardware; what it does show is that training goes on at full speed.

``resize_accuracy``: test accuracy (``summary.json`` ``metrics.test_accuracy``) of an MWMS
``--workers 2:3`` job resized 3 -> 2 (``python -m orchestrator resize RUN --workers 2`` once worker 0
ended epoch :data:`SHRINK_AFTER_EPOCH`) and 2 -> 3 (once the group at 2 ended
:data:`GROW_AFTER_EPOCHS` epochs) against a fixed ``--workers 3`` job with the same seed, the same
global batch (48: keep-global) and epochs, run one after the other; the row is the difference in
points, |elastic - fixed| x 100 (target <= 1.5). The steps each size trained are in the details
(``segments``): the resize lands at the step every worker saves at, a step or more after the command.
"""

from __future__ import annotations

import statistics
import subprocess
from pathlib import Path
from typing import Sequence

from bench.stats import summarize
from bench.tfjobs import ORCHESTRATOR, PY, REPO, TaskLog, base_env, run_orchestrated

PSS_WORKERS = 3
PSS_EPOCHS = 16  # 90 steps an epoch (global batch 16, one worker a step): ~0.8 s an epoch on 2 cores
PSS_LOSE_STEP = 675  # mid-epoch 8: 6 epochs measured before the loss, 7 after it
ACCURACY_EPOCHS = 30  # 30 steps an epoch at the global batch 48: long enough for two resizes to land
SHRINK_AFTER_EPOCH = 3
GROW_AFTER_EPOCHS = 3  # epochs the group at 2 ends before the grow is asked


def pss_args(epochs: int = PSS_EPOCHS, lose_step: int = PSS_LOSE_STEP) -> list[str]:
    """PSS, chief + ``--workers 2:3`` + 1 ps, worker 2 lost at the job's step ``lose_step``."""
    return ["--strategy", "parameter_server", "--ps", "1", "--workers", f"{PSS_WORKERS - 1}:{PSS_WORKERS}",
            "--epochs", str(epochs), "--inject-fault", f"worker:{PSS_WORKERS - 1}:lose@step={lose_step}"]


def accuracy_args(elastic: bool, epochs: int = ACCURACY_EPOCHS) -> list[str]:
    """MWMS, 3 workers fixed or ``--workers 2:3`` (global batch 48 either way), seed 0."""
    return ["--workers", "2:3" if elastic else "3", "--epochs", str(epochs), "--seed", "0"]


def epoch_rates(epochs: Sequence[tuple[int, int, float]]) -> list[tuple[float, float, float]]:
    """``(start unix, end unix, steps/s)`` of each epoch between two consecutive epoch-end markers
    ``(epoch, step, unix)``; an epoch without time or steps between its markers is left out."""
    return [(t0, t1, (s1 - s0) / (t1 - t0)) for (_, s0, t0), (_, s1, t1) in zip(epochs, epochs[1:])
            if t1 > t0 and s1 > s0]


def shrink_rates(epochs: Sequence[tuple[int, int, float]], fault_unix: float,
                 settle_epochs: int = 1) -> tuple[list[float], list[float]]:
    """Steps/s of the epochs that ended before ``fault_unix`` and of those that began after it, the
    first ``settle_epochs`` of the latter left out (the coordinator re-dispatching the lost worker's
    closure); the epoch the fault fell in counts on neither side."""
    rates = epoch_rates(epochs)
    before = [r for t0, t1, r in rates if t1 <= fault_unix]
    after = [r for t0, t1, r in rates if t0 >= fault_unix][settle_epochs:]
    return before, after


def shrink_ratio(before: Sequence[float], after: Sequence[float], workers: int) -> float | None:
    """The median steps/s after the loss of one of ``workers`` over ``(workers - 1) / workers`` of the
    median before it: 1 when the job keeps exactly the share of the workers left, above 1 when the rate
    drops less (None without a rate on either side)."""
    if not before or not after or workers < 2:
        return None
    return statistics.median(after) / ((workers - 1) / workers * statistics.median(before))


def coordinator_restarts(summary: dict | None, coordinator: str = "chief:0") -> int | None:
    """How many times ``summary.json`` says the coordinator was started again (its attempts - 1)."""
    for task in (summary or {}).get("tasks") or []:
        if task.get("task") == coordinator and isinstance(task.get("attempts"), int):
            return task["attempts"] - 1
    return None


def points_apart(elastic: float | None, fixed: float | None) -> float | None:
    """|elastic - fixed| in accuracy points (fractions x 100); None when either is missing."""
    return None if elastic is None or fixed is None else abs(elastic - fixed) * 100


def spread_points(accuracies: Sequence[float | None]) -> float | None:
    """How far apart the runs of one kind came out, in points (max - min, x 100): the noise floor the
    elastic runs' difference is read against; None with fewer than two runs."""
    kept = [a for a in accuracies if a is not None]
    return round((max(kept) - min(kept)) * 100, 2) if len(kept) >= 2 else None


def _test_accuracy(summary: dict | None) -> float | None:
    value = ((summary or {}).get("metrics") or {}).get("test_accuracy")
    return float(value) if isinstance(value, (int, float)) else None


# -- pss_shrink ---------------------------------------------------------------------------------------
def pss_shrink_section(suite, log) -> None:
    """The ``pss_shrink`` section of :class:`bench.run.Suite`: ``runs`` jobs (1 with ``--quick``)."""
    runs = 1 if suite.quick else 3
    done = []
    for _ in range(runs):
        done.append(m := measure_pss_shrink(suite.workdir, suite._id("pss-shrink")))
        log(f"pss_shrink run {m['run']}: exit {m['exit']}, coordinator restarts {m['coordinator_restarts']}, "
            f"{m['steps_per_s_before']} -> {m['steps_per_s_after']} steps/s, ratio {m['ratio']}"
            + (f"; incomplete: {m['incomplete']}" if m.get("incomplete") else ""))
    label = (f"PSS chief + --workers {PSS_WORKERS - 1}:{PSS_WORKERS} + 1 ps, worker {PSS_WORKERS - 1} lost "
             f"(lose fault) at step {PSS_LOSE_STEP}")
    note = ("2 shared cores: chief, workers and ps contend for the same CPU, so the rate hardly depends on the "
            "worker count and the ratio reads ~1.5; it shows training going on at full speed, not PSS scaling")
    suite.notes.append(f"pss_shrink: {note}")
    before = [m["steps_per_s_before"] for m in done]
    after = [m["steps_per_s_after"] for m in done]
    suite.add("12", "pss_shrink_rate_ratio", f"chief's steps/s at {PSS_WORKERS - 1} workers after the loss / "
              f"({PSS_WORKERS - 1}/{PSS_WORKERS} x its steps/s at {PSS_WORKERS} before it), {label}", "ratio",
              [m["ratio"] for m in done], ">= 1",
              {"note": note, "steps_per_s_before": summarize(before), "steps_per_s_after": summarize(after),
               "measured": "chief's epoch-end markers: epochs ended before the fault line / begun after it, the "
               "first after it and epoch 1 left out", "command": "launch --plain " + " ".join(pss_args()),
               "runs": done})
    suite.add("12", "pss_shrink_coordinator_restarts", f"coordinator (chief) restarts, {label}", "restarts",
              [m["coordinator_restarts"] for m in done], "<= 0")
    suite.add("12", "pss_shrink_steps_per_s_before", f"chief's steps/s at {PSS_WORKERS} workers, {label}",
              "steps/s", before)
    suite.add("12", "pss_shrink_steps_per_s_after", f"chief's steps/s at {PSS_WORKERS - 1} workers, {label}",
              "steps/s", after)


def measure_pss_shrink(workdir: Path, run_id: str) -> dict:
    """One PSS job that loses worker 2: the rates, the ratio and the coordinator restarts."""
    r = run_orchestrated(workdir, run_id, pss_args(), "chief-0")
    lost = f"worker-{PSS_WORKERS - 1}"
    fault = TaskLog.read(r.run_dir / "attempt-0" / lost / "stdout.log").fault
    parked = next((t for t, line in r.events if f"{lost} parked" in line), None)
    fault_unix = fault[2] if fault else parked  # the task's own line, else the orchestrator's when it parked it
    before, after = shrink_rates(r.coordinator.epochs, fault_unix) if fault_unix else ([], [])
    summary = r.summary or {}
    out = {"run": run_id, "exit": r.exit_code, "fault": fault, "parked_line_unix": parked,
           "coordinator_restarts": coordinator_restarts(summary), "restarts": summary.get("restarts"),
           "segments": summary.get("segments"), "parked": (summary.get("elastic") or {}).get("parked"),
           "epochs_before": len(before), "epochs_after": len(after),
           "steps_per_s_before": round(statistics.median(before), 2) if before else None,
           "steps_per_s_after": round(statistics.median(after), 2) if after else None,
           "ratio": shrink_ratio(before, after, PSS_WORKERS)}
    if r.exit_code != 0 or fault_unix is None or out["ratio"] is None:
        out["incomplete"] = f"exit {r.exit_code}, fault {fault}, {len(before)}/{len(after)} epochs before/after"
    return out


# -- resize_accuracy ----------------------------------------------------------------------------------
def resize_accuracy_section(suite, log) -> None:
    """The ``resize_accuracy`` section of :class:`bench.run.Suite`: ``runs`` pairs (1 with ``--quick``),
    the fixed run first in every other pair."""
    runs = 1 if suite.quick else 2
    pairs = []
    for i in range(runs):
        sides = {}
        for side in (("fixed", "elastic") if i % 2 == 0 else ("elastic", "fixed")):
            sides[side] = (measure_resized(suite.workdir, suite._id("resize-acc-elastic")) if side == "elastic"
                           else measure_fixed(suite.workdir, suite._id("resize-acc-fixed")))
        pair = {**sides, "points": points_apart(sides["elastic"]["test_accuracy"], sides["fixed"]["test_accuracy"])}
        pairs.append(pair)
        log(f"resize_accuracy: fixed {sides['fixed']['test_accuracy']}, elastic {sides['elastic']['test_accuracy']} "
            f"(sizes {sides['elastic'].get('sizes')}), {pair['points']} points apart"
            + (f"; incomplete: {sides['elastic']['incomplete']}" if sides["elastic"].get("incomplete") else ""))
    label = f"MWMS --workers 2:3 resized 3 -> 2 -> 3 vs --workers 3, seed 0, global batch 48, {ACCURACY_EPOCHS} epochs"
    fixed = [p["fixed"]["test_accuracy"] for p in pairs]
    elastic = [p["elastic"]["test_accuracy"] for p in pairs]
    signed = [None if e is None or f is None else round((e - f) * 100, 2) for e, f in zip(elastic, fixed)]
    suite.add("12", "resize_accuracy_points", f"test accuracy apart (absolute difference), {label}",
              "points", [p["points"] for p in pairs], "<= 1.5",
              {"elastic_minus_fixed_points": signed, "fixed_test_accuracy": summarize(fixed),
               "fixed_runs_apart_points": spread_points(fixed),
               "elastic_test_accuracy": summarize(elastic),
               "command": f"launch --plain {' '.join(accuracy_args(True))}; resize RUN --workers 2 after epoch "
               f"{SHRINK_AFTER_EPOCH}; resize RUN --workers 3 after {GROW_AFTER_EPOCHS} epochs at 2 / launch --plain "
               + " ".join(accuracy_args(False)), "pairs": pairs})
    suite.add("12", "resize_accuracy_elastic", f"test accuracy after 3 -> 2 -> 3, {label}", "accuracy", elastic)
    suite.add("12", "resize_accuracy_fixed", f"test accuracy of the fixed 3-worker run, {label}", "accuracy", fixed)


def measure_fixed(workdir: Path, run_id: str) -> dict:
    r = run_orchestrated(workdir, run_id, accuracy_args(False), "worker-0")
    return {"run": run_id, "exit": r.exit_code, "test_accuracy": _test_accuracy(r.summary),
            "steps": ((r.summary or {}).get("metrics") or {}).get("steps")}


def _resize(workdir: Path, run_id: str, workers: int) -> int:
    done = subprocess.run([PY, "-m", "orchestrator", "resize", run_id, "--runs-dir", str(workdir), "--workers",
                           str(workers)], cwd=REPO, env=base_env(), capture_output=True, text=True, timeout=60)
    return done.returncode


def epochs_ended(log: Path) -> int:
    """How many epoch-end markers ``log`` has (0 while it does not exist)."""
    return len(TaskLog.read(log).epochs)


def measure_resized(workdir: Path, run_id: str) -> dict:
    """One ``--workers 2:3`` job: ``resize --workers 2`` once worker 0 ended epoch :data:`SHRINK_AFTER_EPOCH`
    (the first life's log), ``resize --workers 3`` once the group at 2 (the next life, ``attempt-1``)
    ended :data:`GROW_AFTER_EPOCHS` epochs; the job then trains to its end."""
    asked: list[int] = []

    def shrink_when(run_dir: Path, events) -> str | None:
        if epochs_ended(run_dir / "attempt-0" / "worker-0" / "stdout.log") < SHRINK_AFTER_EPOCH:
            return None
        asked.append(_resize(workdir, run_id, 2))
        return ORCHESTRATOR  # with signal 0: nothing sent

    def grow_when(run_dir: Path, events) -> bool:
        if len(asked) == 1 and epochs_ended(run_dir / "attempt-1" / "worker-0" / "stdout.log") >= GROW_AFTER_EPOCHS:
            asked.append(_resize(workdir, run_id, 3))
        return False  # never stops the job: it trains to its end

    r = run_orchestrated(workdir, run_id, accuracy_args(True), "worker-0", kill_when=shrink_when,
                         kill_signal=0, stop_when=grow_when)
    summary = r.summary or {}
    segments = summary.get("segments") or []
    out = {"run": run_id, "exit": r.exit_code, "resize_exit": asked, "test_accuracy": _test_accuracy(summary),
           "steps": (summary.get("metrics") or {}).get("steps"), "sizes": [s.get("workers") for s in segments],
           "segments": [{k: s.get(k) for k in ("workers", "first_step", "last_step", "cause", "steps_lost")}
                        for s in segments]}
    if r.exit_code != 0 or asked != [0, 0] or out["sizes"] != [3, 2, 3]:
        out["incomplete"] = (f"exit {r.exit_code}, resize exits {asked}, sizes {out['sizes']}; "
                             + " | ".join(line for _, line in r.events[-6:]))
        out["test_accuracy"] = None  # not a 3 -> 2 -> 3 run: not compared
    return out
