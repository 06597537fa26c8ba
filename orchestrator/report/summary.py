"""The end-of-job report: ``runs/<run-id>/summary.json`` and the final text."""

from __future__ import annotations

import json
import os
import resource
import time
from pathlib import Path

from orchestrator.proto import supervisor_pb2 as pb
from orchestrator.supervisor import JobResult, Supervisor, TaskRuntime, describe_exit
from orchestrator.supervisor.states import exit_fields

_INTEGER_METRICS = ("global_batch_size", "batch_size_per_replica", "replicas", "steps_per_epoch", "epochs",
                    "resumed_from_step", "evaluated_step")
_COORDINATOR_METRICS = ("test_accuracy", "test_loss", "final_loss", "global_batch_size", "batch_size_per_replica", "replicas", "steps_per_epoch", "epochs", "resumed_from_step")


def peak_rss_bytes() -> int:
    """Peak resident set size of this process in bytes (``ru_maxrss`` is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def heartbeat_dict(rt: TaskRuntime) -> dict | None:
    """The latest heartbeat of a task as plain JSON, or None."""
    if rt.heartbeat is None:
        return None
    hb = rt.heartbeat.heartbeat
    out: dict = {
        "phase": pb.Phase.Name(hb.phase).removeprefix("PHASE_").lower(),
        "cpu_percent": round(hb.cpu_percent, 1),
        "rss_bytes": hb.rss_bytes,
        "heartbeats": rt.heartbeat.count,
    }
    for name in ("step", "epoch", "loss", "examples_per_second"):
        if hb.HasField(name):
            out[name] = getattr(hb, name)
    if hb.metrics:
        out["metrics"] = dict(hb.metrics)
    return out


def _task_dict(rt: TaskRuntime) -> dict:
    code = rt.exit_code
    return {
        "task": str(rt.task),
        "state": rt.state.value,
        "address": rt.plan.address,
        "attempts": rt.attempt + 1,
        "restarts": rt.restarts,
        "pid": rt.pid,
        **exit_fields(code),
        "exit": describe_exit(code) if code is not None else None,
        "reason": rt.reason,
        "stdout": str(rt.stdout_path) if rt.stdout_path else None,
        "stderr": str(rt.stderr_path) if rt.stderr_path else None,
        "last_heartbeat": heartbeat_dict(rt),
        "process_sample": {k: v for k, v in rt.sample.items() if k != "at"} if rt.sample else None,
        "earlier_attempts": rt.history,
    }


def build_summary(supervisor: Supervisor, result: JobResult) -> dict:
    """Everything the user needs after the job, as JSON-ready data."""
    plan = supervisor.plan
    spec = plan.spec
    coordinator = next(rt for rt in supervisor.tasks if rt.task == spec.coordinator)
    metrics: dict = {}
    if coordinator.heartbeat is not None:
        hb = coordinator.heartbeat.heartbeat
        if hb.HasField("step"):
            metrics["steps"] = hb.step
        if hb.HasField("loss"):
            metrics["final_loss"] = hb.loss
        builtin = coordinator.plan.reports_heartbeats
        for name, value in hb.metrics.items():
            if name in _COORDINATOR_METRICS or not builtin:  # a user's program: every metric it reported
                metrics[name] = int(value) if name in _INTEGER_METRICS else value
    evaluation = None
    evaluator = next((rt for rt in supervisor.tasks if rt.task.task_type == "evaluator"), None)
    if evaluator is not None and evaluator.heartbeat is not None:
        evaluation = {k: (int(v) if k == "evaluated_step" else v) for k, v in evaluator.heartbeat.heartbeat.metrics.items()
                      if k.startswith("eval_") or k == "evaluated_step"} or None
    user_program = next((tp.argv for tp in plan.tasks if not tp.reports_heartbeats), None)
    return {
        "run_id": plan.run_id,
        "run_dir": str(plan.run_dir),
        "status": result.state.value,
        "exit_code": result.exit_code,
        "reason": result.reason,
        "wall_time_s": round(result.wall_time_s, 3),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(supervisor.started_wall)),
        "strategy": spec.strategy.value,
        "topology": {"chief": spec.chief, "worker": spec.workers, "ps": spec.ps, "evaluator": spec.evaluator},
        "cluster": dict(plan.cluster),
        "threads_per_task": plan.threads_per_task,
        "program": list(user_program) if user_program else "built-in",
        "training": None if user_program else {
            "loop": spec.training.loop,
            "data": spec.training.data or "digits",
            "epochs": spec.training.epochs,
            "batch_size_per_replica": spec.training.batch_size_per_replica,
            "replicas": spec.replicas,
            "global_batch_size": spec.global_batch_size,
            "steps_per_epoch": metrics.get("steps_per_epoch", spec.training.steps_per_epoch),
        },
        "metrics": metrics,
        "evaluation": evaluation,
        "model_dir": str(plan.run_dir / "model") if (plan.run_dir / "model").is_dir() else None,
        "tensorboard_dir": str(plan.run_dir / "tensorboard") if (plan.run_dir / "tensorboard").is_dir() else None,
        "root_cause": result.root_cause.to_dict() if result.root_cause and result.exit_code != 0 else None,
        "restarts": supervisor.restarts_used,
        "max_restarts": spec.supervision.max_restarts,
        "restart_policy": {role: p.value for role, p in spec.supervision.restart_policy.items()},
        "recoveries": [r.to_dict(supervisor.started_at) for r in result.recoveries],
        "failures": [f.to_dict() for f in result.failures],
        "tasks": [_task_dict(rt) for rt in supervisor.tasks],
        "orchestrator": {"pid": os.getpid(), "peak_rss_bytes": peak_rss_bytes()},
    }


def write_summary(run_dir: Path, summary: dict) -> Path:
    """Write ``summary.json`` atomically; returns its path."""
    path = run_dir / "summary.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def format_final(summary: dict, root_cause_tail: int = 12) -> str:
    """The final text report shown in the terminal."""
    m = summary["metrics"]
    t = summary["training"]
    lines = [
        f"Job {summary['status']} in {summary['wall_time_s']:.1f} s: {summary['reason']}",
        f"  run dir     {summary['run_dir']}",
    ]
    if t is None:
        lines.append(f"  program     {' '.join(summary['program'][4:])} ({summary['strategy']})")  # after execwrap --
    else:
        lines.append(
            f"  strategy    {summary['strategy']}, {t['loop']} loop, {t['replicas']} replica(s), global batch "
            f"{t['global_batch_size']} = {t['batch_size_per_replica']} per replica"
            + (f", {t['steps_per_epoch']} steps/epoch" if t.get("steps_per_epoch") else "")
            + f", data {t['data']}"
        )
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
            lines.append("  result      " + ", ".join(parts))
    if summary.get("evaluation"):
        ev = summary["evaluation"]
        lines.append("  evaluator   " + ", ".join(
            f"{k.removeprefix('eval_')} {v:.4f}" if k != "evaluated_step" else f"at step {v}" for k, v in ev.items()))
    lines.append("  tasks")
    for t in summary["tasks"]:
        restarts = f" ({t['restarts']} restart{'s' if t['restarts'] != 1 else ''})" if t["restarts"] else ""
        lines.append(f"    {t['task']:<12} {t['state']:<10} {t['exit'] or '-':<20} {t['reason']}{restarts}")
    for r in summary.get("recoveries", []):
        line = f"  recovery    {r['scope']} restart of {', '.join(r['tasks'])} after {r['cause']}"
        if r["detection_to_resumed_training_s"] is not None:
            line += f"; working again after {r['detection_to_resumed_training_s']:.1f} s"
        if r["resumed_from_step"] is not None:
            line += f", resumed from step {r['resumed_from_step']}"
        lines.append(line)
    rc = summary.get("root_cause")
    if rc:
        lines.append(f"  root cause  {rc['task']} (attempt {rc['attempt']}): " + (
            f"exit code {rc['exit_code']}" if rc["exit_code"] is not None else f"signal {rc['signal']}"
        ) + (f": {rc['message']}" if rc["message"] else ""))
        lines.append(f"  log         {rc['log_path']}")
        tail = [ln for ln in rc["stderr_tail"].splitlines() if ln.strip()][-root_cause_tail:]
        if tail:
            lines.append("  last lines of its stderr:")
            lines.extend("    | " + ln for ln in tail)
    if summary.get("model_dir"):
        lines.append(f"  model       {summary['model_dir']}")
    if summary.get("tensorboard_dir"):
        lines.append(f"  tensorboard tensorboard --logdir {summary['tensorboard_dir']}")
    lines.append(f"  summary     {summary['run_dir']}/summary.json")
    return "\n".join(lines)
