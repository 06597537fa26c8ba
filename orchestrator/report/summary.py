"""The end-of-job report: ``runs/<run-id>/summary.json`` and the final text."""

from __future__ import annotations

import os
import resource
import textwrap
import time
from pathlib import Path

from orchestrator.plan import Plan
from orchestrator.rundir import RunDir, write_json_atomic
from orchestrator.supervisor import formed, rehearsal
from orchestrator.supervisor.forensics import left_behind_text
from orchestrator.supervisor.snapshot import JobSnapshot, LastHeartbeat, TaskSnapshot
from orchestrator.supervisor.states import describe_exit, exit_fields

_INTEGER_METRICS = ("global_batch_size", "batch_size_per_replica", "replicas", "steps_per_epoch", "epochs",
                    "resumed_from_step", "evaluated_step")
_COORDINATOR_METRICS = ("test_accuracy", "test_loss", "final_loss", "global_batch_size", "batch_size_per_replica",
                        "replicas", "steps_per_epoch", "epochs", "resumed_from_step")

SUMMARY_FIELDS: dict[str, str] = {
    "run_id": "the run id, also the name of the run directory",
    "run_dir": "absolute path of the run directory",
    "status": "`Succeeded`, `Failed`, `Preempted` (saved and left; `launch --resume` continues it) or `Interrupted`",
    "exit_code": "the orchestrator's exit code: 0 succeeded, 1 failed, 3 succeeded but an injected fault never "
                 "fired, 75 preempted, 130 interrupted",
    "reason": "one line: why the job ended (`chief-0 exited 0`, the failure that ended it)",
    "wall_time_s": "seconds from the start to the end of the job",
    "started_at": "local start time, ISO 8601 with the UTC offset",
    "strategy": "`multi_worker_mirrored`, `parameter_server`, `mirrored` or `hogwild`",
    "topology": "task type -> task count (`chief`, `worker`, `ps`, `evaluator`)",
    "cluster": "the training cluster of TF_CONFIG: task type -> list of `host:port`",
    "threads_per_task": "TF intra-op threads each task was given",
    "program": "`built-in`, or your program's argv (the command after `--`)",
    "training": "the built-in program's options (loop, threads, checkpoint_every, data, epochs, batch sizes, "
                "replicas, steps_per_epoch); `null` for your own program",
    "metrics": "the coordinator's last report: `steps`, `final_loss`, `test_accuracy`, `test_loss`, batch sizes, "
               "`resumed_from_step`; every metric your program reported",
    "evaluation": "the evaluator's last `eval_*` metrics and `evaluated_step`, or `null`",
    "model_dir": "the SavedModel the chief exported, or `null`",
    "tensorboard_dir": "the chief's TensorBoard logs, or `null`",
    "root_cause": "the failure that ended a failed job (task, attempt, exit code or signal, message, log path, "
                  "stderr tail, likely culprit, peak RSS, likely OOM; `gpu_oom` for a GPU out-of-memory: "
                  "error, device, memory used / total, hint), or `null`",
    "restarts": "restarts used (each group or task restart counts one)",
    "max_restarts": "restarts allowed (`--max-restarts`)",
    "restart_policy": "role -> restart policy in force",
    "recoveries": "each recovery: cause, scope, tasks, `detected_at_s`, `restarted_at_s`, `resumed_at_s`, "
                  "`detection_to_resumed_training_s`, `resumed_from_step` (seconds since the start)",
    "failures": "every failure seen, recovered or not, in order (the fields of `root_cause`)",
    "lives": "each orchestrator lifetime of the run (`launch --resume` adds one): `life`, `started_at`, `ended_at`, "
             "`started_at_unix`, `ended_at_unix`, "
             "`ended` (its final state), `cause`, `resumed_from_step`, `last_step`, `steps_lost`, `pid`, "
             "`global_batch_size` (as the coordinator reported it)",
    "late_failures": "failures after the job had succeeded (a warning, not a failure of the job)",
    "faults": "each injected fault (`--inject-fault`) and whether it fired (one that never fired in a job that "
              "succeeded: exit code 3, the rehearsal tested nothing)",
    "cluster_check": "what the training tasks formed vs the plan: `checked` (MWMS and PSS), `planned_workers` "
                     "(chief + workers), `formed` (task -> `replicas_in_sync`, `cluster_workers` it reported), "
                     "`mismatches` (one line each), `allowed` (`--allow-cluster-mismatch`)",
    "warnings": "what the job lost or cut off without failing, one line each: an evaluator stopped before its "
                "last evaluation (`final evaluation lost`), a finished task stuck in its exit (the thread it was "
                "stuck in), an evaluator that never evaluated (a crash loop: `the same error N times`), a "
                "non-finite loss (the task and the first step; `--on-nan`), a log cut by `--max-log-size` (how much)",
    "spares": "each warm spare: pid, state (`used`, `stopped`, `died`, ...), the task it became",
    "tasks": "one entry per task (below)",
    "peak_gpu_memory_bytes": "the most GPU memory any task's devices held together during the job, or `null` "
                             "without GPU samples (docs/gpus.md)",
    "orchestrator": "the orchestrator process: `pid`, `peak_rss_bytes`",
}
"""Every top-level field of ``summary.json`` (what :func:`build_summary` returns) -> what it holds.
The docs site's summary reference is made from it; ``tests/unit/test_docs_reference.py`` checks
that it names exactly the keys :func:`build_summary` writes."""

TASK_FIELDS: dict[str, str] = {
    "task": "`worker:1`",
    "state": "the task's final state: `Succeeded`, `Failed`, `Stopped` (by the orchestrator), or `Pending` / "
             "`Starting` / `Running`",
    "address": "`host:port` of its `tf.distribute` server",
    "attempts": "attempts started (1 + restarts)",
    "restarts": "restarts of this task",
    "pid": "pid of its last attempt (a container's host pid, a Slurm task's local `srun`)",
    "exit_code": "exit code of its last attempt, or `null` when it died of a signal",
    "signal": "the signal it died of (`SIGKILL`), or `null`",
    "exit": "the exit in words (`exit code 0`, `signal SIGTERM`)",
    "reason": "why it ended (`stopped after chief-0 succeeded (it serves until stopped)`)",
    "stdout": "path of its last attempt's stdout log",
    "stderr": "path of its last attempt's stderr log",
    "last_heartbeat": "its last heartbeat (below), or `null` for a program that never reported",
    "process_sample": "the last CPU / RSS sample of a task that does not report (`cpu_percent`, `rss_bytes`)",
    "earlier_attempts": "each earlier attempt: `attempt`, `pid`, `state`, `exit`, `reason`",
    "gpus": "its GPUs, or `null` for none: `count`, `devices` (UUIDs), the last sample's `utilization_percent` "
            "(mean), `memory_used_bytes` and `memory_total_bytes` (its devices together), `peak_memory_bytes` "
            "over the job, `samples` per device",
    "left_behind": "processes its attempts left running that were ended for it (a daemon in its own session): "
                   "`pid`, `cmdline`, `by` (`wrapper` or `backend`), `attempt`; empty when none",
}
"""Every field of an entry of ``summary.json``'s ``tasks`` (what :func:`task_dict` returns)."""

HEARTBEAT_FIELDS: dict[str, str] = {
    "phase": "`initializing`, `serving`, `training`, `finishing`, `evaluating`, `saving` or `done`",
    "cpu_percent": "CPU of the task's process, % of one core",
    "rss_bytes": "resident memory of the task's process",
    "heartbeats": "heartbeats received from the task",
    "step": "global step (absent when never reported)",
    "epoch": "epoch (absent when never reported)",
    "loss": "last loss (absent when never reported)",
    "examples_per_second": "throughput (absent when never reported)",
    "metrics": "every other metric the task reported (`accuracy`, `eval_accuracy`, ...)",
    "first_step_s": "seconds the task has been in its first training step (judged by the startup timeout, not the "
                    "stall timeout); absent once past it",
}
"""Every field of a task's ``last_heartbeat`` in ``summary.json`` (what :func:`heartbeat_dict` returns)."""


def peak_rss_bytes() -> int:
    """Peak resident set size of this process in bytes (``ru_maxrss`` is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def heartbeat_dict(beat: LastHeartbeat | None) -> dict | None:
    """The latest heartbeat of a task as plain JSON, or None."""
    if beat is None:
        return None
    out: dict = {
        "phase": beat.phase,
        "cpu_percent": round(beat.cpu_percent, 1),
        "rss_bytes": beat.rss_bytes,
        "heartbeats": beat.count,
    }
    for name in ("step", "epoch", "loss", "examples_per_second"):
        value = getattr(beat, name)
        if value is not None:
            out[name] = value
    if beat.metrics:
        out["metrics"] = dict(beat.metrics)
    if beat.first_step_s is not None:
        out["first_step_s"] = round(beat.first_step_s, 1)
    return out


def task_dict(t: TaskSnapshot) -> dict:
    """One task's entry of ``summary.json``."""
    code = t.exit_code
    sample = None if t.cpu_percent is None else {"cpu_percent": t.cpu_percent, "rss_bytes": t.rss_bytes}
    return {
        "task": str(t.task),
        "state": t.state.value,
        "address": t.address,
        "attempts": t.attempt + 1,
        "restarts": t.restarts,
        "pid": t.pid,
        **exit_fields(code),
        "exit": describe_exit(code) if code is not None else None,
        "reason": t.reason,
        "stdout": str(t.stdout_path) if t.stdout_path else None,
        "stderr": str(t.stderr_path) if t.stderr_path else None,
        "last_heartbeat": heartbeat_dict(t.heartbeat),
        "process_sample": sample,
        "earlier_attempts": [dict(h) for h in t.history],
        "gpus": gpus_dict(t) if t.gpu_count or t.gpus else None,
        "left_behind": [dict(e) for e in t.left_behind],
    }


def gpus_dict(t: TaskSnapshot) -> dict:
    """A task's GPUs: how many it holds, which (UUIDs, when this orchestrator assigned them),
    the latest sample per device and summed (utilisation: the mean), and the peak memory its
    devices held together during the job (bytes)."""
    usage = t.gpus
    return {
        "count": t.gpu_count,
        "devices": list(t.gpu_devices),
        "utilization_percent": round(sum(u.utilization_percent for u in usage) / len(usage), 1) if usage else None,
        "memory_used_bytes": sum(u.memory_used_bytes for u in usage) if usage else None,
        "memory_total_bytes": sum(u.memory_total_bytes for u in usage) if usage else None,
        "peak_memory_bytes": t.peak_gpu_memory_bytes,
        "samples": [u.to_dict() for u in usage],
    }


def build_summary(snapshot: JobSnapshot) -> dict:
    """Everything the user needs after the job, as JSON-ready data, from the job's final snapshot."""
    plan = snapshot.plan
    spec = plan.spec
    layout = RunDir(plan.run_dir)
    coordinator = snapshot.task(spec.coordinator)
    metrics: dict = {}
    if coordinator.heartbeat is not None:
        hb = coordinator.heartbeat
        if hb.step is not None:
            metrics["steps"] = hb.step
        if hb.loss is not None:
            metrics["final_loss"] = hb.loss
        builtin = coordinator.reports_heartbeats
        for name, value in hb.metrics.items():
            if name in _COORDINATOR_METRICS or not builtin:  # a user's program: every metric it reported
                metrics[name] = int(value) if name in _INTEGER_METRICS else value
    evaluation = None
    evaluator = next((t for t in snapshot.tasks if t.task.task_type == "evaluator"), None)
    if evaluator is not None and evaluator.heartbeat is not None:
        evaluation = {k: (int(v) if k == "evaluated_step" else v) for k, v in evaluator.heartbeat.metrics.items()
                      if k.startswith("eval_") or k == "evaluated_step"} or None
    user_program = next((tp.argv for tp in plan.tasks if not tp.reports_heartbeats), None)
    root_cause = snapshot.root_cause
    return {
        "run_id": plan.run_id,
        "run_dir": str(plan.run_dir),
        "status": snapshot.state.value,
        "exit_code": snapshot.exit_code,
        "reason": snapshot.reason,
        "wall_time_s": round(snapshot.elapsed_s, 3),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(snapshot.started_wall)),
        "strategy": spec.strategy.value,
        "topology": {"chief": spec.chief, "worker": spec.workers, "ps": spec.ps, "evaluator": spec.evaluator},
        "cluster": dict(plan.cluster),
        "threads_per_task": plan.threads_per_task,
        "program": list(user_program) if user_program else "built-in",
        "training": None if user_program else {
            "loop": "hogwild" if spec.strategy.value == "hogwild" else spec.training.loop,
            "threads": spec.training.threads or 2 if spec.strategy.value == "hogwild" else None,
            "checkpoint_every": spec.training.checkpoint_every,
            "data": spec.training.data or "digits",
            "epochs": spec.training.epochs,
            "batch_size_per_replica": spec.training.batch_size_per_replica,
            "replicas": spec.replicas,
            "global_batch_size": spec.global_batch_size,
            "steps_per_epoch": metrics.get("steps_per_epoch", spec.training.steps_per_epoch),
        },
        "metrics": metrics,
        "evaluation": evaluation,
        "model_dir": str(layout.model) if layout.model.is_dir() else None,
        "tensorboard_dir": str(layout.tensorboard) if layout.tensorboard.is_dir() else None,
        "root_cause": root_cause.to_dict() if root_cause and snapshot.exit_code != 0 else None,
        "restarts": snapshot.restarts_used,
        "max_restarts": spec.supervision.max_restarts,
        "restart_policy": {role: p.value for role, p in spec.supervision.restart_policy.items()},
        "recoveries": [r.to_dict() for r in snapshot.recoveries],
        "failures": [dict(f) for f in snapshot.earlier_failures] + [f.to_dict() for f in snapshot.failures],
        "lives": [life.to_dict() for life in snapshot.lives],
        "late_failures": [f.to_dict() for f in snapshot.late_failures],
        "warnings": list(snapshot.warnings),
        "faults": fault_report(plan),
        "cluster_check": formed.summary_field(spec, ((t.task, t.heartbeat.metrics if t.heartbeat else {})
                                                     for t in snapshot.tasks)),
        "spares": [{"pid": s.pid, "state": s.state, "task": s.task or None} for s in snapshot.spares],
        "tasks": [task_dict(t) for t in snapshot.tasks],
        "peak_gpu_memory_bytes": max(t.peak_gpu_memory_bytes or 0 for t in snapshot.tasks)
        if any(t.peak_gpu_memory_bytes is not None for t in snapshot.tasks) else None,
        "orchestrator": {"pid": os.getpid(), "peak_rss_bytes": peak_rss_bytes()},
    }


def fault_report(plan: Plan) -> list[dict]:
    """Each injected fault (``--inject-fault``) and whether it fired: the task prints
    ``injecting fault: KIND at TRIGGER=N`` to its logs when it does (``orchestrator.task.faults``)."""
    return rehearsal.fault_report(plan)


def write_summary(run_dir: Path, summary: dict) -> Path:
    """Write ``summary.json`` atomically; returns its path."""
    return write_json_atomic(RunDir(run_dir).summary, summary)


def _wrap(label: str, text: str, width: int) -> list[str]:
    """``  label       text`` wrapped to ``width`` columns, continuation lines indented."""
    head = f"  {label:<11} "
    return textwrap.wrap(text, width=width, initial_indent=head, subsequent_indent=" " * len(head),
                         break_long_words=True, break_on_hyphens=False) or [head.rstrip()]


def _fit(line: str, width: int) -> str:
    """``line`` in ``width`` columns: a longer one keeps its start and its end (where a long
    exception message says what was wrong) around " ... "."""
    if len(line) <= width:
        return line
    keep = max(0, width - 5)
    return f"{line[:keep // 2]} ... {line[len(line) - (keep - keep // 2):]}"


def _failure_text(f: dict) -> str:
    how = f"exit code {f['exit_code']}" if f["exit_code"] is not None else f"signal {f['signal']}"
    text = f"{f['task']} (attempt {f['attempt']}): {how}" + (f": {f['message']}" if f["message"] else "")
    if f.get("likely_culprit"):
        text += f"; a consequence of a peer ({f['peer_error']}): likely culprit {f['likely_culprit']}"
    return text


def format_final(summary: dict, root_cause_tail: int = 12, width: int = 120) -> str:
    """The final text report shown in the terminal, no line wider than ``width`` columns
    (paths and free text wrap onto indented continuation lines)."""
    m = summary["metrics"]
    t = summary["training"]
    lines = textwrap.wrap(f"Job {summary['status']} in {summary['wall_time_s']:.1f} s: {summary['reason']}",
                          width=width, subsequent_indent="    ", break_on_hyphens=False)
    lines += _wrap("run dir", summary["run_dir"], width)
    if t is None:
        # after execwrap --
        batch = m.get("global_batch_size")
        lines += _wrap("program", f"{' '.join(summary['program'][4:])} ({summary['strategy']}"
                       + (f", global batch {batch}" if batch else "") + ")", width)
    else:
        lines += _wrap("strategy", f"{summary['strategy']}, {t['loop']} loop, {t['replicas']} replica(s), global batch "
                       f"{t['global_batch_size']} = {t['batch_size_per_replica']} per replica"
                       + (f", {t['steps_per_epoch']} steps/epoch" if t.get("steps_per_epoch") else "")
                       + f", data {t['data']}", width)
    if m:
        parts = []
        if "steps" in m:
            parts.append(f"steps {m['steps']}")
        if "final_loss" in m:
            parts.append(f"final loss {m['final_loss']:.4f}")
        if "test_accuracy" in m:
            parts.append(f"test accuracy {m['test_accuracy']:.4f}")
        parts += [f"{k} {v:.4g}" for k, v in m.items() if k not in _COORDINATOR_METRICS and k != "steps"]
        if parts:
            lines += _wrap("result", ", ".join(parts), width)
    if summary.get("evaluation"):
        ev = summary["evaluation"]
        lines += _wrap("evaluator", ", ".join(
            f"{k.removeprefix('eval_')} {v:.4f}" if k != "evaluated_step" else f"at step {v}"
            for k, v in ev.items()), width)
    lines.append("  tasks")
    for task in summary["tasks"]:
        restarts = f" ({task['restarts']} restart{'s' if task['restarts'] != 1 else ''})" if task["restarts"] else ""
        head = f"    {task['task']:<12} {task['state']:<11} {task['exit'] or '-':<15} "
        lines += textwrap.wrap(f"{task['reason'] or '-'}{restarts}", width=width, initial_indent=head,
                               subsequent_indent=" " * len(head), break_on_hyphens=False)
    for task in summary["tasks"]:
        if task.get("left_behind"):
            lines += _wrap("cleanup", f"{task['task']}: {left_behind_text(task['left_behind'])}", width)
    for r in summary.get("recoveries", []):
        line = f"{r['scope']} restart of {', '.join(r['tasks'])} after {r['cause']}"
        if r["detection_to_resumed_training_s"] is not None:
            line += f"; working again after {r['detection_to_resumed_training_s']:.1f} s"
        if r["resumed_from_step"] is not None:
            line += f", resumed from step {r['resumed_from_step']}"
        lines += _wrap("recovery", line, width)
    if summary.get("spares"):
        used = [s for s in summary["spares"] if s["state"] == "used"]
        lines += _wrap("spares", f"{len(summary['spares'])} warm spare(s) started, {len(used)} used"
                       + (" (" + ", ".join(f"pid {s['pid']} became {s['task']}" for s in used) + ")" if used else ""),
                       width)
    for f in summary.get("late_failures", []):
        when = "after the job succeeded" if f["after_success"] else "after training ended"
        lines += _wrap("WARNING", f"{_failure_text(f)} ({when})", width)
    for text in (summary.get("cluster_check") or {}).get("mismatches", []):
        lines += _wrap("WARNING", f"{text}: the tasks did not train as one cluster"
                       + (" (allowed: --allow-cluster-mismatch)" if summary["cluster_check"]["allowed"] else ""),
                       width)
    batches = [(life["global_batch_size"], life["life"]) for life in summary.get("lives") or []
               if life.get("global_batch_size") is not None]
    if len({b for b, _ in batches}) > 1:
        lines += _wrap("WARNING", "the global batch changed between lives: "
                       + ", ".join(f"{b} (life {n})" for b, n in batches), width)
    for text in summary.get("warnings", []):
        lines += _wrap("WARNING", text, width)
    for fault in summary.get("faults", []):
        if not fault["fired"]:
            lines += _wrap("WARNING", f"the injected fault {fault['fault']} did not fire: the rehearsal tested nothing",
                           width)
    rc = summary.get("root_cause")
    if rc:
        lines += _wrap("root cause", _failure_text(rc), width)
        lines += _wrap("log", rc["log_path"], width)
        tail = [ln for ln in rc["stderr_tail"].splitlines() if ln.strip()][-root_cause_tail:]
        if tail:
            lines.append("  last lines of its stderr:")
            lines.extend(_fit("    | " + ln, width) for ln in tail)
    if summary.get("model_dir"):
        lines += _wrap("model", summary["model_dir"], width)
    if summary.get("tensorboard_dir"):
        lines += _wrap("tensorboard", f"tensorboard --logdir {summary['tensorboard_dir']}", width)
    lines += _wrap("summary", f"{summary['run_dir']}/summary.json", width)
    return "\n".join(lines)
