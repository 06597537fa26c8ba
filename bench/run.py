"""``python -m bench [--quick] [--only SECTION ...]``: the whole benchmark suite.

Sections (in order): ``tf`` (throughput and launch -> first step, orchestrated vs
hand-launched, interleaved), ``colocated`` (MWMS 2 workers pinned to their own cores over one
process with the same global batch on the same cores: the built-in digits MLP, then the
compute-bound ``bench/convnet.py``, pinned and with ``--no-pin``, full runs only),
``recovery`` (MWMS and PSS worker SIGKILL with warm spares: detection, recovery time and its
ratio to the cold start, steps lost), ``hang`` (a frozen worker:
detection, default settings), ``detect`` (a SIGKILLed task on the local backend, no TensorFlow:
fault -> decision, ``bench/detect.py``), ``beats`` (how late heartbeats arrive on a loaded machine:
``bench/heartbeat_gaps.py``), ``footprint`` (orchestrator RSS and CPU during a 5-task job), ``client`` (per-task
cost of the health client), ``ingest`` (heartbeats/s into the HealthServer), ``scale``
(detection with many simulated tasks), ``checkpoint`` (throughput cost of ``--checkpoint-every``
10 / 50 against per epoch; steps lost to a preemption and to a SIGKILL with
``--checkpoint-every 10``), ``hogwild`` (examples/s of ``--strategy hogwild --threads`` 1, 2, 4
next to ``mirrored``), ``preemption`` (SIGTERM to the orchestrator mid-training, ``launch
--resume`` at once: preemption -> training resumed over the same job's cold start, steps lost;
``bench/preemption.py``), ``dataservice`` (the tf.data service: the built-in job through it / without,
an input-bound map with 0, 1, 2 data workers; ``bench/dataservice.py``; full runs only), ``security``
(launch -> first step with mutual TLS over ``--insecure``; throughput with ``--isolate-network`` over without),
``resize`` (a planned MWMS resize 2 -> 1 with ``resize RUN --workers 1`` once a warm spare is ready: the pause,
notice -> first step at the new size, over the same job's cold start, steps lost; ``bench/resize.py``; full runs
only, ``--quick --only resize`` runs one), ``pss_shrink`` (a PSS ``--workers 2:3`` job loses worker 2 mid-training:
coordinator restarts, the chief's steps/s at 2 workers over 2/3 of its rate at 3; ``bench/elastic.py``; full runs
only), ``resize_accuracy`` (test accuracy of an MWMS run resized 3 -> 2 -> 3 against a fixed 3-worker run with the
same seed, in points; ``bench/elastic.py``; full runs only).
Writes ``bench/results/<name>.json`` and ``bench/results/README.md`` (a run with ``--only``
writes its own section of that file and ``suite-<sections>.json``, keeping the full run's table);
``--results-dir DIR`` writes them there instead (CI: a temporary directory, so the committed
results stay as they are).

``--quick`` runs every section once with the fewest runs and shortest jobs that still give every
figure: a smoke test of every code path (but the co-located convnet's), 8 TensorFlow jobs
(jobs with the same arguments are shared between sections), ~3.5 minutes on this 2-core
machine, every section but those in
``FULL_ONLY`` (``beats``: about a minute of deliberately overloaded cores; ``preemption``: its one
preemption is two cold starts, 48-80 s here by the load; ``resize``: a job that must run until a spare is ready;
``--quick --only preemption`` runs it); its figures are not comparable to
a full run's. Exit status: 0 when every section ran and every figure has at least
one value, 1 otherwise (a section that raised, or a figure with no value), so CI catches a
broken bench.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import traceback
from pathlib import Path

from bench import dataservice, elastic, light, preemption, resize, timeline
from bench.kills import (
    REJOINED,
    epoch_ends,
    mwms_worker_into_epoch,
    pss_worker_once_trained,
    rejoined,
    resumed_an_epoch,
    spares_warm,
    step_at,
)
from bench.report import _diff, _r, _tail, log, machine, write_report
from bench.stats import meets, ratios, summarize
from bench.tfjobs import PY, REPO, TaskLog, Topology, base_env, precompile, run_hand, run_orchestrated, warm_up
from orchestrator.spec.supervision import SupervisionSpec

RESULTS = Path(__file__).resolve().parent / "results"
PREEMPTION = ["--inject-fault", "worker:1:term@step=60"]
SIGKILL_EVERY_10 = ["--checkpoint-every", "10", "--inject-fault", "worker:1:kill@step=67"]
SECTIONS = ("tf", "colocated", "recovery", "hang", "detect", "beats", "footprint", "client", "ingest", "scale",
            "several", "checkpoint", "hogwild", "preemption", "dataservice",
            "security", "resize", "pss_shrink", "resize_accuracy")
# left out of --quick unless named by --only: over a minute on these 2 shared cores
FULL_ONLY = ("preemption", "beats", "dataservice", "resize", "pss_shrink", "resize_accuracy")


class Suite:
    def __init__(self, quick: bool, workdir: Path, results: Path = RESULTS, pairs: int | None = None) -> None:
        self.quick = quick
        self.pairs = pairs  # the tf section's pairs (default: 1 with --quick, else 5)
        self.workdir = workdir
        self.results = results
        self.rows: list[dict] = []
        self.notes: list[str] = []
        self.errors: list[str] = []
        self.n = 0
        self._runs: dict = {}
        self.section = ""  # the section running: each figure file records it (the docs' tables group by it)
        self.light = light.LightSections(self)  # the sections without TensorFlow

    def run_section(self, section: str) -> bool:
        """Run one section; False (and the reason in ``errors``) when it raised or added a
        figure without any value."""
        log(f"section {section}")
        started, rows_before = time.monotonic(), len(self.rows)
        self.section = section
        try:
            getattr(self.light if section in light.SECTIONS else self, section)()
        except Exception:  # noqa: BLE001 - reported, and the suite's exit status says so
            self.errors.append(f"section {section} raised:\n{traceback.format_exc()}")
            log(f"section {section} FAILED after {time.monotonic() - started:.0f} s: {self.errors[-1]}")
            return False
        empty = [r["name"] for r in self.rows[rows_before:] if r["stat"]["runs"] == 0]
        if empty or len(self.rows) == rows_before:
            self.errors.append(f"section {section}: no value for {', '.join(empty) or 'any figure'}")
            log(f"section {section} FAILED after {time.monotonic() - started:.0f} s: {self.errors[-1]}")
            return False
        log(f"section {section} done in {time.monotonic() - started:.0f} s")
        return True

    def _id(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}-{self.n:02d}"

    def _orchestrated(self, prefix: str, args: list[str], coordinator: str, **kwargs):
        """``run_orchestrated``; with ``--quick``, a job with the very same arguments run earlier
        by another section is reused (quick figures are smoke tests, not measurements); every --quick
        job samples the orchestrator (``sample_s`` 0.25 s), so the footprint section can reuse one."""
        if self.quick:
            kwargs.setdefault("sample_s", 0.25)
        key = (tuple(args), coordinator, tuple(sorted(kwargs.items())))
        if self.quick and key in self._runs:
            log(f"{prefix}: reusing run {self._runs[key].run_dir.name} (same arguments, --quick)")
            return self._runs[key]
        r = run_orchestrated(self.workdir, self._id(prefix), args, coordinator, **kwargs)
        self._runs[key] = r
        return r

    def add(self, ident: str, name: str, measure: str, unit: str, values, target: str | None = None,
            details: dict | None = None) -> dict:
        stat = summarize(values)
        row = {"id": ident, "name": name, "section": self.section, "measure": measure, "unit": unit, "stat": stat,
               "target": target,
               "met": meets(stat, target) if target else None, "details": details or {}}
        self.rows.append(row)
        (self.results / f"{name}.json").write_text(json.dumps({**{k: v for k, v in row.items() if k != "stat"}, **stat},
                                                         indent=2, default=str) + "\n")
        log(f"{name}: median {stat['median']} {unit} (min {stat['min']}, max {stat['max']}, {stat['runs']} runs)"
            + (f", target {target}: {'met' if row['met'] else 'MISSED'}" if target else ""))
        return row

    # -- 1, 2: throughput and launch -> first step -----------------------------------------
    def tf(self) -> None:
        pairs = self.pairs or (1 if self.quick else 5)
        precompile()
        if not self.quick:  # the first pair's orchestrated side would otherwise import TensorFlow cold
            warm_up()
        # --quick: MWMS only (PSS orchestration runs in the footprint section; hand-launched PSS
        # only in the full run)
        topos = [Topology("mwms2", "multi_worker_mirrored", 0, 2, 0, 2 if self.quick else 10)]
        if not self.quick:
            topos.append(Topology("pss", "parameter_server", 1, 2, 1, 8))
        for topo in topos:
            orch, hand = [], []
            for i in range(pairs):
                order = ("o", "h") if i % 2 == 0 else ("h", "o")  # alternate who goes first: drift cancels
                for side in order:
                    if side == "o":
                        r = self._orchestrated(f"{topo.name}-orch", topo.launch_args(), topo.coordinator)
                        orch.append(r)
                    else:
                        r = run_hand(self.workdir, self._id(f"{topo.name}-hand"), topo)
                        hand.append(r)
                    log(f"{topo.name} {r.side}: exit {r.exit_code}, first step {r.first_step_s()}, "
                        f"{r.coordinator.examples_per_second()} ex/s, wall {r.wall_s:.1f} s")
            o_rate = [r.coordinator.examples_per_second() for r in orch]
            h_rate = [r.coordinator.examples_per_second() for r in hand]
            o_first = [r.first_step_s() for r in orch]
            h_first = [r.first_step_s() for r in hand]
            # where the orchestrated side's extra time goes: the launch's timeline, both sides
            names = [f"{t}-{i}" for t, i in topo.tasks()]
            o_points = [timeline.points(r, names) for r in orch]
            o_line = timeline.summarize(o_points, names)
            h_line = timeline.summarize([timeline.points(r, names) for r in hand], names)
            log(f"{topo.name} launch timeline (medians of {pairs} pair(s)):\n{timeline.table(o_line, h_line)}")
            started = [[p[f"{n} started"] for n in names if f"{n} started" in p] or [None] for p in o_points]
            first_task, last_task = [s[0] for s in started], [s[-1] for s in started]
            label = {"mwms2": "MWMS 2 workers", "pss": "PSS chief + 2 workers + 1 ps"}[topo.name]
            self.add("1", f"throughput_ratio_{topo.name}", f"training throughput orchestrated / hand-launched, {label}",
                     "ratio", ratios(o_rate, h_rate), ">= 0.99",
                     {"orchestrated_examples_per_s": summarize(o_rate), "hand_examples_per_s": summarize(h_rate),
                      "epochs": topo.epochs, "measured": "coordinator's epoch-end markers, epoch 1 excluded"})
            self.add("1", f"throughput_{topo.name}_orchestrated", f"throughput orchestrated, {label}", "examples/s",
                     o_rate)
            self.add("1", f"throughput_{topo.name}_hand", f"throughput hand-launched, {label}", "examples/s", h_rate)
            self.add("2", f"first_step_ratio_{topo.name}",
                     f"launch -> first step orchestrated / hand-launched, {label}", "ratio",
                     ratios(o_first, h_first), "<= 1.05",
                     {"orchestrated_s": summarize(o_first), "hand_s": summarize(h_first),
                      "timeline_orchestrated_s": o_line, "timeline_hand_s": h_line,
                      "orchestrated_launch_to_first_task_started_s": summarize(first_task),
                      "orchestrated_launch_to_last_task_started_s": summarize(last_task),
                      "pairs_in_run_order": [[o, h] for o, h in zip(o_first, h_first)]})
            self.add("2", f"first_step_{topo.name}_orchestrated", f"launch -> first step orchestrated, {label}", "s",
                     o_first)
            self.add("2", f"first_step_{topo.name}_hand", f"launch -> first step hand-launched, {label}", "s", h_first)
            self._footprint_samples(orch, f"{topo.name} ({label})")

    # -- co-located tasks (issue 23, item 1) ----------------------------------------------------
    def colocated(self) -> None:
        """MWMS with 2 workers on this machine (defaults: each pinned to its own cores,
        threads from them) over one process training the same model with the same global batch
        (32: ``--workers 1 --batch-size 32``, every core) on the same cores; runs interleaved
        in alternating order, each its median per-epoch examples/s after the first epoch."""
        rounds = 1 if self.quick else 3
        epochs = 2 if self.quick else 8
        cases = {"mwms2": ["--workers", "2", "--epochs", str(epochs)],  # = the tf section's args (--quick reuses it)
                 "one": ["--workers", "1", "--batch-size", "32", "--epochs", str(epochs)]}
        runs = self._interleaved("coloc", cases, rounds)
        rates = {k: [r.coordinator.examples_per_second() for r in v] for k, v in runs.items()}
        try:  # how the first MWMS run was placed
            pinning = json.loads((runs["mwms2"][0].run_dir / "plan.json").read_text()).get("cpus")
        except (OSError, ValueError):
            pinning = None
        self.add("11", "colocated_mwms2_over_one_process",
                 "MWMS 2 workers on this machine / one process, same model and global batch (32), same cores",
                 "ratio", ratios(rates["mwms2"], rates["one"]), ">= 0.9",
                 {"mwms2_examples_per_s": summarize(rates["mwms2"]), "one_process_examples_per_s":
                  summarize(rates["one"]), "mwms2_cpus": pinning, "epochs": epochs,
                  "measured": "coordinator's epoch-end markers, epoch 1 excluded; defaults (pinned, spares on)"})
        if not self.quick:  # CI's budget: the quick section took 51 s with its 2 TF jobs, 20 s without (idle machine)
            self._colocated_limit(rates["one"], rounds)
            self._colocated_compute_bound(rounds)

    def _colocated_limit(self, one_rates: list[float], rounds: int) -> None:
        """The MLP row's ceiling, measured in the same run: one TF CPU all-reduce of the built-in
        model's gradients between two processes placed as ``launch --workers 2`` places them
        (``bench/allreduce.py``), against the one-process step. Two workers each take at least
        one process's step (this model's step is per-step overhead, not per-example compute:
        half the batch each saves next to nothing) plus the all-reduce, so the ratio cannot pass
        ``step / (step + all-reduce)``. Full runs only."""
        measured = []
        for _ in range(rounds):
            proc = subprocess.run([PY, "-m", "bench.allreduce"], capture_output=True, text=True, cwd=REPO,
                                  env=base_env(), timeout=300)
            try:
                measured.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            except (ValueError, IndexError):
                log(f"allreduce: failed: {proc.stderr[-2000:]}")
        if not measured or not one_rates:
            return
        log(f"allreduce: {measured}")
        allreduce = [m["allreduce_ms"] for m in measured]
        step_ms = 32 / summarize(one_rates)["median"] * 1000  # the one-process run's global batch
        self.add("11", "colocated_allreduce_ms", f"one TF CPU all-reduce of the built-in model's gradients "
                 f"({measured[0]['floats']:,} floats) between two processes pinned as launch pins them, "
                 "less the call's dispatch (bench/allreduce.py)", "ms", allreduce, details={"runs": measured})
        self.add("11", "colocated_mwms2_limit", "estimated ceiling of colocated_mwms2_over_one_process: one "
                 "process's step / (that step + one all-reduce measured alone), medians of this run", "ratio",
                 [round(step_ms / (step_ms + summarize(allreduce)["median"]), 4)],
                 details={"one_process_step_ms": round(step_ms, 3), "allreduce_ms": summarize(allreduce)})

    def _colocated_compute_bound(self, rounds: int) -> None:
        """The same comparison with a compute-bound user program (``bench/convnet.py``: a
        convnet whose step is ~150 MFLOP per example, against one ~0.26 MB all-reduce), each
        way launched by the orchestrator with its defaults, plus MWMS with ``--no-pin``: what
        pinning does where compute, not TF's per-collective latency, bounds the step. Full runs
        only (``--quick`` leaves it out to keep CI within its budget)."""
        program = [PY, str(REPO / "bench" / "convnet.py"), "--global-batch", "64", "--epochs", "6"]
        cases = {"mwms2": ["--workers", "2", "--", *program], "one": ["--workers", "1", "--", *program],
                 "mwms2-no-pin": ["--workers", "2", "--no-pin", "--", *program]}
        runs = self._interleaved("coloc-conv", cases, rounds)
        rates = {k: [r.coordinator.examples_per_second() for r in v] for k, v in runs.items()}
        details = {f"{k.replace('-', '_')}_examples_per_s": summarize(v) for k, v in rates.items()}
        self.add("11", "colocated_mwms2_over_one_process_convnet",
                 "MWMS 2 workers on this machine / one process, compute-bound convnet (bench/convnet.py), "
                 "global batch 64, same cores",
                 "ratio", ratios(rates["mwms2"], rates["one"]), ">= 0.9",
                 {**details, "measured": "coordinator's epoch-end markers, epoch 1 excluded; defaults (pinned, "
                  "spares on); mwms2_no_pin: --no-pin"})
        self.add("11", "colocated_convnet_pinned_over_unpinned",
                 "MWMS 2 workers, compute-bound convnet: pinned (default) / --no-pin", "ratio",
                 ratios(rates["mwms2"], rates["mwms2-no-pin"]))

    def _interleaved(self, prefix: str, cases: dict[str, list[str]], rounds: int) -> dict[str, list]:
        """Each case's orchestrated runs (``launch`` arguments by name), ``rounds`` rounds, the
        order reversed every other round so that neither side always runs first."""
        runs: dict[str, list] = {k: [] for k in cases}
        for i in range(rounds):
            for name in (list(cases) if i % 2 == 0 else list(reversed(cases))):
                r = self._orchestrated(f"{prefix}-{name}", cases[name], "worker-0")
                runs[name].append(r)
                log(f"{prefix} {name}: {r.coordinator.examples_per_second()} examples/s "
                    f"(global batch {r.coordinator.global_batch})")
        return runs

    # -- 3, 4: SIGKILL detection and recovery with warm spares --------------------------------
    def recovery(self) -> None:
        """MWMS 2 workers and PSS (chief, 2 workers, ps): one worker SIGKILLed, each ratio
        (recovery / that same run's cold launch -> first step) measured in one run.

        MWMS: the bench SIGKILLs worker-1 a third of an epoch into an epoch (the 4th or a later
        one) that began after a warm spare was ready (:func:`bench.kills.mwms_worker_into_epoch`:
        the spares start once the job has trained as long as a start takes and import at the
        lowest CPU priority beside the two workers, so when they are ready depends on how busy
        the cores are); recovery = kill -> first step of the resumed training; the job is
        stopped (Ctrl-C) once the resumed training finished an epoch. ``--quick``: the
        checkpoint section's job, killed by an injected fault at step 67. PSS: the bench SIGKILLs worker-1 once the
        chief is in epoch ``kill_epoch`` and (full runs) the spare is ready; recovery = kill ->
        the coordinator has the restarted worker back in its rotation (its ``Worker ... has been
        recovered`` log line, ``worker/rotation.py``). Each run records whether the spare that
        took over was ready before the kill.
        """
        runs = 1 if self.quick else 3
        mwms_kill_epoch = 3
        # PSS: the job is far longer than the recovery (the chief would otherwise finish before a restarted
        # worker is back when the machine is loaded) and is stopped once the worker is back in the rotation
        pss_epochs, kill_epoch = (60, 2) if self.quick else (80, 3)
        detect, m_ratio, m_rec, m_cold, lost, p_ratio, p_rec, p_cold, details = ([] for _ in range(9))
        for _ in range(runs):
            if self.quick:  # the checkpoint section's SIGKILL run (the same arguments): one job for both
                r = self._orchestrated("recovery-mwms", self._lost_args(SIGKILL_EVERY_10), "worker-0")
                fault = TaskLog.read(r.run_dir / "attempt-0" / "worker-1" / "stdout.log").fault
            else:  # long enough by construction: stopped once measured
                r = run_orchestrated(self.workdir, self._id("recovery-mwms"), ["--workers", "2", "--epochs", "400"],
                                     "worker-0", kill_when=mwms_worker_into_epoch(mwms_kill_epoch, 1 / 3),
                                     stop_when=resumed_an_epoch)
                killed_step = step_at(epoch_ends(r.run_dir / "attempt-0" / "worker-1" / "stdout.log"),
                                      r.killed_at) if r.killed_at else None
                fault = ("kill", killed_step, r.killed_at) if killed_step is not None else None
            resumed = TaskLog.read(r.run_dir / "attempt-1" / "worker-0" / "stdout.log")
            s = r.summary or {}
            if not fault or not s.get("failures") or not s.get("recoveries") or not resumed.first_step:
                log(f"recovery run {r.run_dir.name}: incomplete (exit {r.exit_code}){_tail(r)}")
            else:
                kill_at = fault[2]
                d = s["failures"][0]["wall_time"] - kill_at
                rec = resumed.first_step[1] - kill_at
                c = r.first_step_s()
                resumed_from = s["recoveries"][0].get("resumed_from_step")
                if resumed_from is None:  # the first heartbeat after the resume may precede the metric
                    resumed_from = resumed.first_step[0] - 1
                warm = spares_warm(r, kill_at)
                detect.append(d)
                m_rec.append(rec)
                m_cold.append(c)
                m_ratio.append(rec / c if c else None)
                lost.append(fault[1] - resumed_from)
                details.append({"run": r.run_dir.name, "strategy": "multi_worker_mirrored", "killed_at_step": fault[1],
                                "resumed_from_step": resumed_from, "detect_s": d, "recovery_s": rec, "cold_start_s": c,
                                "spares_ready_before_kill": warm,
                                "detected_to_restarted_s": _diff(s["recoveries"][0], "restarted_at_s", "detected_at_s"),
                                "restarted_to_resumed_s": _diff(s["recoveries"][0], "resumed_at_s", "restarted_at_s")})
                log(f"recovery MWMS: detect {d:.3f} s, kill -> first step after resume {rec:.2f} s, cold start "
                    f"{c:.2f} s, ratio {rec / c:.3f}, spares warm {warm}, lost {lost[-1]} steps")
            r = run_orchestrated(self.workdir, self._id("recovery-pss"),
                                 ["--strategy", "parameter_server", "--workers", "2", "--epochs", str(pss_epochs)],
                                 "chief-0",
                                 kill_when=pss_worker_once_trained(kill_epoch, wait_for_spares=not self.quick),
                                 stop_when=rejoined)
            chief_log = r.run_dir / "attempt-0" / "chief-0" / "stdout.log"
            back = REJOINED.search(chief_log.read_text(errors="replace")) if chief_log.exists() else None
            c = r.first_step_s()
            if not r.killed_at or not back or not c:
                log(f"recovery run {r.run_dir.name}: incomplete (exit {r.exit_code}, killed {r.killed_at}, "
                    f"rejoined {bool(back)}){_tail(r)}")
                continue
            rec = float(back[1]) - r.killed_at
            warm = spares_warm(r, r.killed_at)
            p_rec.append(rec)
            p_cold.append(c)
            p_ratio.append(rec / c)
            details.append({"run": r.run_dir.name, "strategy": "parameter_server", "killed_in_epoch": kill_epoch,
                            "recovery_s": rec, "cold_start_s": c, "spares_ready_before_kill": warm})
            log(f"recovery PSS: kill -> worker back in the coordinator's rotation {rec:.2f} s, cold start {c:.2f} s, "
                f"ratio {rec / c:.3f}, spares warm {warm}")
        warm_runs = sum(1 for d in details if d["spares_ready_before_kill"])
        spares_note = f"{warm_runs} of {len(details)} runs had their spares ready before the kill"
        self.add("3", "detect_sigkill_tf", "detection of a SIGKILLed MWMS worker (fault -> decision)", "s", detect,
                 "<= 0.2", {"runs": details})
        self.add("4", "recovery_ratio_mwms", "MWMS 2 workers, one SIGKILLed: kill -> first step after resume / cold "
                 "launch -> first step (warm spares)", "ratio", m_ratio, "<= 0.35",
                 {"recovery_s": summarize(m_rec), "cold_start_s": summarize(m_cold), "spares": spares_note,
                  "settings": "defaults (spares on, first restart without backoff); "
                              + ("killed at step 67 (--quick)" if self.quick else
                                 f"SIGKILLed by the bench 1/3 of an epoch into an epoch >= {mwms_kill_epoch} that "
                                 "began after a spare was ready; steps lost from the last epoch's rate"),
                  "detected_to_restarted_s": summarize(d.get("detected_to_restarted_s") for d in details),
                  "restarted_to_resumed_s": summarize(d.get("restarted_to_resumed_s") for d in details)})
        self.add("4", "recovery_mwms_s", "MWMS recovery: SIGKILL -> first step after resume", "s", m_rec)
        self.add("4", "steps_lost_mwms", "MWMS recovery: steps lost (checkpoint interval 45 steps = 1 epoch)", "steps",
                 lost, "<= 45")
        self.add("4", "recovery_ratio_pss", "PSS, one worker SIGKILLed: kill -> worker back in the coordinator's "
                 "rotation / cold launch -> first step (warm spares)", "ratio", p_ratio, "<= 0.3",
                 {"recovery_s": summarize(p_rec), "cold_start_s": summarize(p_cold), "spares": spares_note,
                  "settings": f"defaults; worker-1 SIGKILLed by the bench in epoch {kill_epoch} once the spare is "
                              "ready"})
        self.add("4", "recovery_pss_s", "PSS recovery: SIGKILL -> worker back in the coordinator's rotation", "s",
                 p_rec)

    # -- 3: hang detection --------------------------------------------------------------------
    def hang(self) -> None:
        """A worker frozen (SIGSTOP) mid-training, with the default settings: fault -> hung decision."""
        runs = 1 if self.quick else 3
        timeout = SupervisionSpec().heartbeat_timeout_s
        decision, recorded = [], []
        for _ in range(runs):
            r = self._orchestrated("hang", ["--workers", "2", "--epochs", "2" if self.quick else "3",
                                            "--restart-policy", "never", "--inject-fault", "worker:1:stop@step=30"],
                                   "worker-0")
            fault = TaskLog.read(r.run_dir / "attempt-0" / "worker-1" / "stdout.log").fault
            hung_line = next((t for t, line in r.events if "worker-1 is hung" in line), None)
            s = r.summary or {}
            if not fault or hung_line is None:
                log(f"hang run {r.run_dir.name}: incomplete (exit {r.exit_code}){_tail(r)}")
                continue
            decision.append(hung_line - fault[2])
            if s.get("failures"):
                recorded.append(s["failures"][0]["wall_time"] - fault[2])
            log(f"hang: decision {decision[-1]:.2f} s after the freeze, failure recorded after the stack dump "
                f"{recorded[-1] if recorded else None}")
        details = {"failure_recorded_after_stack_dump_s": summarize(recorded), "heartbeat_timeout_s": timeout}
        self.add("3", "detect_hang_tf", f"detection of a frozen (SIGSTOP) MWMS worker, heartbeat timeout {timeout:g} s "
                 "(fault -> decision)", "s", decision, f"<= {timeout + 1:g}", details)
        self.add("3", "detect_hang_default", "detection of a frozen (SIGSTOP) MWMS worker with the default settings "
                 f"(heartbeat timeout {timeout:g} s; the runs of detect_hang_tf): fault -> hung decision", "s",
                 decision, "<= 5", details)

    # -- 6: footprint -------------------------------------------------------------------------
    def _footprint_samples(self, runs, label: str) -> tuple[list, list, list]:
        peaks, cpus, tf_mapped = [], [], []
        for r in runs:
            if r.summary:
                peaks.append(r.summary["orchestrator"]["peak_rss_bytes"] / 2**20)
            # training from the coordinator's first step (its BENCH_TIMING marker), else from the
            # first live line that shows a step (a short --quick job may print none)
            running = (r.coordinator.first_step[1] if r.coordinator.first_step
                       else next((t for t, line in r.events if "training step" in line), None))
            window = [s for s in r.samples if running and s["t"] >= running]
            if len(window) >= 2 and window[-1]["t"] > window[0]["t"]:
                cpus.append(100 * (window[-1]["cpu_s"] - window[0]["cpu_s"]) / (window[-1]["t"] - window[0]["t"]))
            tf_mapped.append(r.maps_tensorflow)
        if runs and runs[0].samples:
            self.notes.append(f"orchestrator during {label}: peak RSS {_r(summarize(peaks)['median'])} MB, "
                              f"CPU {_r(summarize(cpus)['median'])} % of a core while training")
        return peaks, cpus, tf_mapped

    def footprint(self) -> None:
        # --quick: the tf section's MWMS 2-worker job, reused (sampled like every --quick job: a smoke test of the
        # path; PSS orchestration runs in the recovery section)
        runs = 1 if self.quick else 2
        results = []
        if self.quick:
            args, coordinator, tasks, label = ["--workers", "2", "--epochs", "2"], "worker-0", 2, "MWMS 2 workers"
        else:
            args = ["--strategy", "parameter_server", "--workers", "3", "--ps", "1", "--epochs", "4"]
            coordinator, tasks, label = "chief-0", 5, "PSS chief + 3 worker(s) + 1 ps"
        for _ in range(runs):
            r = self._orchestrated("footprint", args, coordinator, sample_s=0.25)
            log(f"footprint run: exit {r.exit_code}, wall {r.wall_s:.1f} s, {len(r.samples)} samples")
            results.append(r)
        peaks, cpus, tf_mapped = self._footprint_samples(results, f"the {tasks}-task job")
        total_cpu = [100 * r.samples[-1]["cpu_s"] / (r.samples[-1]["t"] - r.launch_unix) for r in results if r.samples]
        self.add("6", "orchestrator_peak_rss", f"orchestrator peak RSS, {label}", "MB",
                 peaks, "<= 100", {"tensorflow_mapped_in_orchestrator": tf_mapped})
        self.add("6", "orchestrator_cpu", f"orchestrator CPU while the {tasks} tasks train", "% of a core", cpus,
                 "<= 3", {"whole_run_incl_startup_percent": summarize(total_cpu)})

    # -- 8: checkpoint cost and steps lost ----------------------------------------------
    def _lost_args(self, fault: list[str]) -> list[str]:
        return ["--workers", "2", "--epochs", "2" if self.quick else "3", "--restart-backoff", "0.2", *fault]

    def checkpoint(self) -> None:
        """MWMS 2 workers, fit: per-epoch examples/s with ``--checkpoint-every`` 10 and 50 over
        the same job checkpointing per epoch only (45 steps), runs interleaved in rotating order
        and paired by round; then steps lost to a preemption (SIGTERM, ``term`` fault) and to a
        SIGKILL with ``--checkpoint-every 10``."""
        rounds = 1 if self.quick else 3
        epochs = 2 if self.quick else 5
        # --quick: per epoch only (the tf section's run, reused); --checkpoint-every 10 runs in the SIGKILL run
        settings: dict[str, list] = {"epoch": []} if self.quick else {"epoch": [], "50": [], "10": []}
        order = list(settings)
        for i in range(rounds):
            for every in order[i % len(order):] + order[:i % len(order)]:
                extra = [] if every == "epoch" else ["--checkpoint-every", every]
                r = self._orchestrated(f"ckpt-{every}", ["--workers", "2", "--epochs", str(epochs), *extra], "worker-0")
                settings[every].append(r.coordinator.examples_per_second())
                log(f"checkpoint {every}: {settings[every][-1]} examples/s")
        base = settings["epoch"]
        for every in [e for e in ("10", "50") if e in settings]:
            self.add("8", f"checkpoint_every_{every}_throughput_ratio",
                     f"throughput with --checkpoint-every {every} / per-epoch checkpoints (45 steps), MWMS 2 workers",
                     "ratio", ratios(settings[every], base), None,
                     {"examples_per_second": summarize(settings[every]), "per_epoch": summarize(base)})
        self.add("8", "checkpoint_per_epoch_throughput", "throughput with per-epoch checkpoints, MWMS 2 workers",
                 "examples/s", base)
        lost = {"preemption": [], "sigkill_every_10": []}
        details = []
        for _ in range(1):
            for kind, args in (("preemption", PREEMPTION), ("sigkill_every_10", SIGKILL_EVERY_10)):
                r = self._orchestrated(f"lost-{kind}", self._lost_args(args), "worker-0")
                out = (r.run_dir / "attempt-0" / "worker-1" / "stdout.log").read_text(errors="replace") \
                    if (r.run_dir / "attempt-0" / "worker-1" / "stdout.log").exists() else ""
                fault = TaskLog.read(r.run_dir / "attempt-0" / "worker-1" / "stdout.log").fault
                saved = re.search(r"checkpoint saved after step (\d+)", out)
                done = int(saved.group(1)) if saved else (fault[1] if fault else None)  # steps done before it ended
                rec = ((r.summary or {}).get("recoveries") or [{}])[0]
                resumed = rec.get("resumed_from_step")
                lost[kind].append(None if done is None or resumed is None else done - resumed)
                details.append({"run": r.run_dir.name, "kind": kind, "steps_done": done, "resumed_from_step": resumed,
                                "exit": rec.get("cause")})
                log(f"steps lost, {kind}: {lost[kind][-1]} (done {done}, resumed from {resumed})")
        self.add("8", "steps_lost_preemption",
                 "steps lost to a preemption (SIGTERM from outside at step 60), MWMS 2 workers", "steps",
                 lost["preemption"], "<= 0", {"runs": details})
        self.add("8", "steps_lost_sigkill_every_10", "steps lost to a SIGKILL at step 67 with --checkpoint-every 10",
                 "steps", lost["sigkill_every_10"], "<= 10", {"runs": details})

    # -- 10: security (issue 37) -------------------------------------------------------------
    def security(self) -> None:
        """What the run's network protection costs, MWMS 2 workers, runs interleaved: launch ->
        first step with mutual TLS (the default) over ``--insecure``, and training throughput with
        ``--isolate-network`` over without (where this machine allows a network namespace)."""
        from orchestrator.backends.netns import probe

        # 30 epochs, 6 rounds: a run of 10 epochs (~7 s) measured the same launch within +-4 % (TLS above
        # --insecure by 4 % in one run), too coarse for a 1 % target
        topo = Topology("mwms2", "multi_worker_mirrored", 0, 2, 0, 2 if self.quick else 30)
        cases = {"tls": topo.launch_args(), "insecure": [*topo.launch_args(), "--insecure"]}
        allowed, why = probe()
        if allowed:
            cases["isolated"] = [*topo.launch_args(), "--isolate-network"]
        else:
            log(f"security: no --isolate-network row: {why}")
        runs = self._interleaved("security", cases, 1 if self.quick else 6)
        first = {k: [r.first_step_s() for r in v] for k, v in runs.items()}
        rate = {k: [r.coordinator.examples_per_second() for r in v] for k, v in runs.items()}
        self.add("10", "first_step_tls_ratio", "launch -> first step, mutual TLS / --insecure, MWMS 2 workers",
                 "ratio", ratios(first["tls"], first["insecure"]), "<= 1.02",
                 {"tls_s": summarize(first["tls"]), "insecure_s": summarize(first["insecure"])})
        if allowed:
            self.add("10", "throughput_isolated_ratio", "training throughput with --isolate-network / without, "
                     "MWMS 2 workers", "ratio", ratios(rate["isolated"], rate["tls"]), ">= 0.99",
                     {"isolated_examples_per_s": summarize(rate["isolated"]),
                      "default_examples_per_s": summarize(rate["tls"])})

    # -- 9: hogwild ---------------------------------------------------------------------
    def hogwild(self) -> None:
        """Examples/s (median per-epoch rate after the first epoch) of ``--strategy hogwild
        --threads`` 1, 2, 4 and of ``--strategy mirrored`` (2 replicas, fit), interleaved."""
        rounds = 1 if self.quick else 3
        epochs = 2 if self.quick else 6
        cases = {"hogwild-1": ["--strategy", "hogwild", "--threads", "1"],
                 "hogwild-2": ["--strategy", "hogwild", "--threads", "2"],
                 "hogwild-4": ["--strategy", "hogwild", "--threads", "4"],
                 "mirrored": ["--strategy", "mirrored", "--replicas", "2"]}
        if self.quick:  # one Hogwild size (mirrored: the full run and tests/e2e)
            cases = {"hogwild-2": cases["hogwild-2"]}
        rates: dict[str, list] = {k: [] for k in cases}
        accuracy: dict[str, list] = {k: [] for k in cases}
        names = list(cases)
        for i in range(rounds):
            for name in names[i % len(names):] + names[:i % len(names)]:
                r = self._orchestrated(name, [*cases[name], "--epochs", str(epochs)], "worker-0")
                rates[name].append(r.coordinator.examples_per_second())
                accuracy[name].append(((r.summary or {}).get("metrics") or {}).get("test_accuracy"))
                log(f"{name}: {rates[name][-1]} examples/s, test accuracy {accuracy[name][-1]}")
        for name in names:
            self.add("9", f"{name.replace('-', '_')}_examples_per_second", f"{name} examples/s (one task, 2 cores)",
                     "examples/s", rates[name], None, {"test_accuracy": summarize(accuracy[name])})
        for name in [n for n in names if n != "mirrored"] if "mirrored" in rates else []:
            self.add("9", f"{name.replace('-', '_')}_over_mirrored", f"{name} / mirrored (2 replicas) examples/s",
                     "ratio", ratios(rates[name], rates["mirrored"]))

    # -- 10: preemption -> training resumed (issue 18) ----------------------------------------
    def preemption(self) -> None:
        """MWMS 2 workers: SIGTERM to the orchestrator in epoch 2, ``launch --resume`` at once
        (``bench/preemption.py``)."""
        preemption.section(self, log)

    # -- 12: a planned MWMS resize's pause (issue 34) -------------------------------------------
    def resize(self) -> None:
        """MWMS ``--workers 1:2``: ``resize RUN --workers 1`` once a spare is ready; the pause over
        the cold start, steps lost (``bench/resize.py``)."""
        resize.section(self, log)

    # -- 12: elastic jobs: a PSS shrink, accuracy after 3 -> 2 -> 3 (issue 34) ----------------------
    def pss_shrink(self) -> None:
        """PSS ``--workers 2:3`` loses worker 2: coordinator restarts, steps/s after over 2/3 of before
        (``bench/elastic.py``)."""
        elastic.pss_shrink_section(self, log)

    def resize_accuracy(self) -> None:
        """MWMS 3 -> 2 -> 3 against a fixed 3-worker run: test accuracy apart, in points (``bench/elastic.py``)."""
        elastic.resize_accuracy_section(self, log)

    # -- 11: the tf.data service (issue 38) ----------------------------------------------------
    def dataservice(self) -> None:
        """Through the tf.data service / without; an input-bound map with 0, 1, 2 data workers
        (``bench/dataservice.py``)."""
        dataservice.section(self, log)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one short run of every section (smoke test, ~2 min)")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, help="run only these sections")
    parser.add_argument("--keep", action="store_true", help="keep the run directories")
    parser.add_argument("--pairs", type=int, default=None, metavar="N",
                        help="interleaved orchestrated/hand pairs per topology in the tf section (default 5; 1 with "
                             "--quick)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS,
                        help=f"where the JSON files and README.md go (default {RESULTS})")
    args = parser.parse_args(argv)
    results = args.results_dir.resolve()
    results.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="bench-runs-"))
    sections = args.only or [s for s in SECTIONS if not (args.quick and s in FULL_ONLY)]
    suite = Suite(args.quick, workdir, results, pairs=args.pairs)
    started = time.monotonic()
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    log(f"runs in {workdir}; results to {results}; load average {load_before}")
    try:
        for section in sections:
            suite.run_section(section)
    finally:
        meta = {"date": time.strftime("%Y-%m-%d %H:%M %Z"), "machine": machine(), "quick": args.quick,
                "load_before": load_before, "load_after": " ".join(f"{x:.2f}" for x in os.getloadavg()),
                "duration_s": time.monotonic() - started, "sections": sections,
                "errors": suite.errors}
        suite_file = "suite.json" if not args.only else f"suite-{'-'.join(args.only)}.json"
        (results / suite_file).write_text(json.dumps(meta, indent=2) + "\n")
        print(write_report(suite, meta, args.only))
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    log(f"done in {meta['duration_s']:.0f} s" + (f"; {len(suite.errors)} section(s) FAILED" if suite.errors else ""))
    for error in suite.errors:
        print(f"bench error: {error}", flush=True)
    return 1 if suite.errors else 0
