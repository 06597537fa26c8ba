"""``/metrics``: the job in the Prometheus text format, through ``prometheus-client``.

Built at each scrape from a status (:func:`orchestrator.report.status.status_dict`), so it is
the same whether the status comes from the launcher itself, from a running orchestrator over
gRPC, or from a finished run's ``summary.json``. Names follow Prometheus' conventions: a
``tfjob_`` prefix, base units in the name (``_seconds``, ``_bytes``, ``_ratio``), ``_total`` for
counters, an enum as one series per state with value 1 for the current one. Labels:
``run_id`` on every series, ``task_type`` and ``task_index`` on the per-task ones.

| metric | type | meaning |
| --- | --- | --- |
| ``tfjob_info`` | gauge (1) | ``strategy``, ``program`` |
| ``tfjob_state`` | gauge (0/1 per ``state``) | the job state |
| ``tfjob_running`` | gauge | 1 while the orchestrator supervises the job |
| ``tfjob_elapsed_seconds`` | gauge | seconds since the job started (its wall time once ended) |
| ``tfjob_restarts_total`` | counter | restarts counted against ``max_restarts`` |
| ``tfjob_max_restarts`` | gauge | the restart budget |
| ``tfjob_failures_total`` | counter | task failures, recovered or not |
| ``tfjob_workers`` | gauge | elastic workers (``--workers MIN:MAX``) only: the worker tasks now |
| ``tfjob_workers_min`` | gauge | elastic workers only: MIN |
| ``tfjob_workers_max`` | gauge | elastic workers only: MAX |
| ``tfjob_task_state`` | gauge (0/1 per ``state``) | each task's state |
| ``tfjob_task_attempt`` | gauge | current attempt (0 first) |
| ``tfjob_task_restarts_total`` | counter | restarts of the task |
| ``tfjob_task_step`` | gauge | global training steps completed (may go back after a restore) |
| ``tfjob_task_epoch`` | gauge | epochs completed |
| ``tfjob_task_loss`` | gauge | latest training loss |
| ``tfjob_task_examples_per_second`` | gauge | training throughput |
| ``tfjob_task_cpu_usage_ratio`` | gauge | CPU use as a fraction of one core |
| ``tfjob_task_resident_memory_bytes`` | gauge | resident set size |
| ``tfjob_task_heartbeat_age_seconds`` | gauge | seconds since the last heartbeat (orchestrator clock) |
| ``tfjob_task_heartbeats_total`` | counter | heartbeats received from the current attempt |
| ``tfjob_task_gpus`` | gauge | GPUs the task holds (jobs with GPUs only) |
| ``tfjob_task_gpu_utilization_ratio`` | gauge | GPU utilisation (NVML), the mean over its devices, 0-1 |
| ``tfjob_task_gpu_memory_used_bytes`` | gauge | device memory in use on its GPUs together |
| ``tfjob_task_gpu_memory_total_bytes`` | gauge | device memory of its GPUs together |
| ``tfjob_task_gpu_memory_peak_bytes`` | gauge | the most its GPUs held together during the job |

A value the task has not reported (no heartbeat yet, a user's program without steps) has no
sample, rather than a made-up 0.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

JOB_STATES = ("Pending", "Starting", "Running", "Restarting", "Succeeded", "Failed", "Interrupted")
TASK_STATES = ("Pending", "Starting", "Running", "Succeeded", "Failed", "Stopped")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class JobCollector(Collector):
    """A prometheus-client collector that reads a fresh status at each scrape.

    Args:
        source: returns the current status (a dict of ``status_dict``'s shape; ``{}`` when
            there is none yet).
    """

    def __init__(self, source: Callable[[], Mapping[str, Any]]) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        status = self._source()
        if not status:
            return
        yield from job_metrics(status)


def _task_labels(task: Mapping[str, Any]) -> tuple[str, str]:
    task_type = task.get("task_type")
    index = task.get("task_index")
    if task_type is None or index is None:  # a summary.json written before these fields existed
        task_type, _, index = str(task["task"]).partition(":")
    return str(task_type), str(index)


def job_metrics(status: Mapping[str, Any]) -> list[Metric]:
    """The metric families of one status (see the module's table)."""
    run = str(status.get("run_id", ""))
    program = status.get("program")
    info = GaugeMetricFamily("tfjob_info", "The job: its strategy and program.",
                             labels=["run_id", "strategy", "program"])
    info.add_metric([run, str(status.get("strategy", "")), "built-in" if program == "built-in" else "user"], 1)
    state = GaugeMetricFamily("tfjob_state", "The job state: 1 for the current one.", labels=["run_id", "state"])
    for name in JOB_STATES:
        state.add_metric([run, name], 1 if status.get("status") == name else 0)
    running = GaugeMetricFamily("tfjob_running", "1 while the orchestrator supervises the job.", labels=["run_id"])
    running.add_metric([run], 1 if status.get("live") else 0)
    elapsed = GaugeMetricFamily("tfjob_elapsed_seconds", "Seconds since the job started (its wall time once ended).",
                                labels=["run_id"])
    elapsed.add_metric([run], float(status.get("elapsed_s", status.get("wall_time_s")) or 0.0))
    restarts = CounterMetricFamily("tfjob_restarts", "Restarts counted against max_restarts.", labels=["run_id"])
    restarts.add_metric([run], float(status.get("restarts") or 0))
    budget = GaugeMetricFamily("tfjob_max_restarts", "Restarts allowed for the whole job.", labels=["run_id"])
    budget.add_metric([run], float(status.get("max_restarts") or 0))
    failures = CounterMetricFamily("tfjob_failures", "Task failures, recovered or not.", labels=["run_id"])
    failures.add_metric([run], float(len(status.get("failures") or ())))
    out: list[Metric] = [info, state, running, elapsed, restarts, budget, failures]
    elastic = status.get("elastic")
    if elastic:  # docs/elastic.md: the size now against MIN..MAX
        for key, name, doc in (("workers", "tfjob_workers", "Worker tasks now (elastic workers)."),
                               ("min", "tfjob_workers_min", "Fewest worker tasks (elastic workers: MIN)."),
                               ("max", "tfjob_workers_max", "Most worker tasks (elastic workers: MAX).")):
            size = GaugeMetricFamily(name, doc, labels=["run_id"])
            size.add_metric([run], float(elastic[key]))
            out.append(size)

    labels = ["run_id", "task_type", "task_index"]

    def gauge(name: str, doc: str) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, doc, labels=labels)
        out.append(family)
        return family

    def counter(name: str, doc: str) -> CounterMetricFamily:
        family = CounterMetricFamily(name, doc, labels=labels)
        out.append(family)
        return family

    task_state = GaugeMetricFamily("tfjob_task_state", "Each task's state: 1 for the current one.",
                                   labels=[*labels, "state"])
    out.append(task_state)
    attempt = gauge("tfjob_task_attempt", "Current attempt of the task (0 first).")
    task_restarts = counter("tfjob_task_restarts", "Restarts of the task.")
    step = gauge("tfjob_task_step", "Global training steps completed (may go back after a restore from a checkpoint).")
    epoch = gauge("tfjob_task_epoch", "Epochs completed.")
    loss = gauge("tfjob_task_loss", "Latest training loss.")
    throughput = gauge("tfjob_task_examples_per_second", "Training throughput, examples per second.")
    cpu = gauge("tfjob_task_cpu_usage_ratio", "CPU use as a fraction of one core.")
    rss = gauge("tfjob_task_resident_memory_bytes", "Resident set size, bytes.")
    age = gauge("tfjob_task_heartbeat_age_seconds", "Seconds since the task's last heartbeat (orchestrator clock).")
    beats = counter("tfjob_task_heartbeats", "Heartbeats received from the task's current attempt.")
    gpu_count = gauge("tfjob_task_gpus", "GPUs the task holds.")
    gpu_util = gauge("tfjob_task_gpu_utilization_ratio", "GPU utilisation (NVML), the mean over the task's devices.")
    gpu_used = gauge("tfjob_task_gpu_memory_used_bytes", "Device memory in use on the task's GPUs together, bytes.")
    gpu_total = gauge("tfjob_task_gpu_memory_total_bytes", "Device memory of the task's GPUs together, bytes.")
    gpu_peak = gauge("tfjob_task_gpu_memory_peak_bytes", "The most device memory the task's GPUs held during the job.")
    for task in status.get("tasks") or ():
        values = [run, *_task_labels(task)]
        for name in TASK_STATES:
            task_state.add_metric([*values, name], 1 if task.get("state") == name else 0)
        attempt.add_metric(values, float(task.get("attempt", (task.get("attempts") or 1) - 1)))
        task_restarts.add_metric(values, float(task.get("restarts") or 0))
        beat = task.get("last_heartbeat") or {}
        sample = task.get("process_sample") or {}
        for family, value in ((step, beat.get("step")), (epoch, beat.get("epoch")), (loss, beat.get("loss")),
                              (throughput, beat.get("examples_per_second"))):
            if value is not None:
                family.add_metric(values, float(value))
        cpu_percent = beat.get("cpu_percent", sample.get("cpu_percent"))
        if cpu_percent is not None:
            cpu.add_metric(values, float(cpu_percent) / 100.0)
        rss_bytes = beat.get("rss_bytes", sample.get("rss_bytes"))
        if rss_bytes is not None:
            rss.add_metric(values, float(rss_bytes))
        if task.get("heartbeat_age_s") is not None and status.get("live"):
            age.add_metric(values, float(task["heartbeat_age_s"]))
        if beat.get("heartbeats") is not None:
            beats.add_metric(values, float(beat["heartbeats"]))
        gpus = task.get("gpus") or {}
        util = gpus.get("utilization_percent")
        for family, value in ((gpu_count, gpus.get("count")), (gpu_util, None if util is None else util / 100.0),
                              (gpu_used, gpus.get("memory_used_bytes")), (gpu_total, gpus.get("memory_total_bytes")),
                              (gpu_peak, gpus.get("peak_memory_bytes"))):
            if value is not None and gpus:
                family.add_metric(values, float(value))
    return out


def registry_for(source: Callable[[], Mapping[str, Any]], process: bool = True) -> CollectorRegistry:
    """A registry holding the job's collector and, with ``process``, this process's own
    ``process_*`` metrics (the orchestrator's CPU seconds and resident memory)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(JobCollector(source))
    if process:
        from prometheus_client import ProcessCollector

        ProcessCollector(registry=registry)
    return registry


def render(registry: CollectorRegistry) -> bytes:
    """The registry in the Prometheus text format (``CONTENT_TYPE``)."""
    return generate_latest(registry)
