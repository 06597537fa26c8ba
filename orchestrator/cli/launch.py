"""``python -m orchestrator launch``: plan, start, supervise and report one job."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any

from orchestrator import api, jsontext
from orchestrator.cli import started
from orchestrator.cli.backend import add_backend_arguments, backend_options
from orchestrator.cli.checks import check_program, print_warnings
from orchestrator.cli.requeue import SlurmContinuation
from orchestrator.cli.requeue import check as check_continue
from orchestrator.cli.specflags import add_data_service_flags, add_gpu_flags, workers_arg
from orchestrator.errors import SpecError
from orchestrator.report.live import LinesView, QuietView, TableView
from orchestrator.resume import check_program as resumed_program
from orchestrator.resume import check_resumable, resumed_spec
from orchestrator.rundir import RunDir
from orchestrator.spec.elastic import BATCH_POLICIES, LR_SCALINGS
from orchestrator.spec.faults import Fault
from orchestrator.spec.loader import build_spec, merge, overrides_from_flags, read_spec_file
from orchestrator.spec.model import JobSpec, Strategy, TrainingSpec
from orchestrator.supervisor import EXIT_PREEMPTED
from orchestrator.supervisor.records.snapshot import View
from orchestrator.web.bind import parse_bind


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "launch",
        help="run a distributed TensorFlow job on this machine",
        description="Plan a cluster, start one process per task with its TF_CONFIG, supervise it over gRPC "
        "health, and report. Exit codes: 0 succeeded, 1 job failed, 2 bad input, 3 succeeded but an injected "
        "fault never fired (the rehearsal tested nothing), 75 preempted (state saved: continue it with --resume "
        "RUN_ID), 130 interrupted.",
    )
    add_arguments(p)
    p.set_defaults(func=run_launch)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Every option of ``launch`` (``sbatch`` takes them too and passes them on)."""
    p.add_argument("--spec", metavar="FILE", default=None,
                   help="cluster spec file (YAML or JSON, see cluster_specs/); flags given explicitly override "
                        "its fields")
    topo = p.add_argument_group("topology")
    topo.add_argument("--strategy", default=None,
                      help="multi_worker_mirrored (default), parameter_server, mirrored (one task, --replicas "
                      "devices), or hogwild (one task, --threads threads training one shared model without locks)")
    topo.add_argument("--workers", default=None, metavar="N|MIN:MAX", type=workers_arg,
                      help="worker tasks (default 4; 2 with parameter_server); MIN:MAX: elastic workers "
                      "(multi_worker_mirrored, parameter_server): the job starts at MAX, and a resumed run may "
                      "continue at any size in between (--resume RUN_ID --workers N; docs/elastic.md)")
    topo.add_argument("--batch-policy", default=None, choices=BATCH_POLICIES,
                      help="with --workers MIN:MAX: keep-global (default: the global batch is --batch-size x the "
                      "replicas at MAX at every size, per-replica = global / replicas; sizes that do not divide "
                      "it are refused) or keep-per-replica (--batch-size per replica at every size)")
    topo.add_argument("--lr-scaling", default=None, choices=LR_SCALINGS,
                      help="with --batch-policy keep-per-replica: linear (the learning rate x global batch / the "
                      "global batch at MAX) or none (default)")
    topo.add_argument("--grow-back", default=None, metavar="on|off|SECONDS",
                      help="with --workers MIN:MAX under multi_worker_mirrored: a job running below MAX grows back "
                      "toward MAX by itself when capacity returns (other runs' leases released), through a "
                      "coordinated save, at the earliest SECONDS after its last size change (on: 30, the "
                      "default; off: only `resize` grows it)")
    topo.add_argument("--ps", type=int, default=None, help="parameter-server tasks (parameter_server only; default 1)")
    topo.add_argument("--chief", action="store_true", default=None,
                      help="add a chief task (always present with parameter_server)")
    topo.add_argument("--evaluator", action="store_const", const=1, default=None,
                      help="add a sidecar evaluator task that evaluates the chief's checkpoints on the test split")
    topo.add_argument("--replicas", type=int, default=None,
                      help="replicas (logical CPU devices) of the one task under --strategy mirrored (default 2)")
    topo.add_argument("--threads", type=int, default=None,
                      help="threads of the one task under --strategy hogwild (default 2)")
    add_data_service_flags(topo)
    add_gpu_flags(p.add_argument_group("GPUs (docs/gpus.md)"))
    train = p.add_argument_group("training (built-in program)")
    train.add_argument("--loop", choices=("fit", "custom"), default=None,
                       help="tf-keras Model.fit (default) or a custom loop (strategy.run / "
                            "ClusterCoordinator.schedule)")
    train.add_argument("--data", default=None, metavar="PATH",
                       help="a .npz file (x_train, y_train, x_test, y_test) or a directory of train*/test* TFRecord "
                       "files; default: the embedded digits")
    d = TrainingSpec()
    train.add_argument("--epochs", type=int, default=None, help=f"epochs (default {d.epochs})")
    train.add_argument("--batch-size", type=int, default=None, dest="batch_size",
                       help=f"batch size per replica; global = this x replicas (default {d.batch_size_per_replica})")
    train.add_argument("--steps-per-epoch", type=int, default=None, help="default: train examples / global batch")
    train.add_argument("--learning-rate", type=float, default=None,
                       help=f"Adam learning rate (default {d.learning_rate})")
    train.add_argument("--seed", type=int, default=None, help="seed of the split and initial weights (default 0)")
    train.add_argument("--checkpoint-every", type=int, default=None, metavar="STEPS",
                       help="also checkpoint every STEPS global steps, so a task killed without warning loses at "
                       "most STEPS steps (default: at the end of each epoch; a preemption by SIGTERM loses none)")
    run = p.add_argument_group("run")
    run.add_argument("--runs-dir", default="runs", help="where run directories go (default ./runs)")
    run.add_argument("--run-id", default=None, help="name of the run directory (default: time stamp + random suffix)")
    run.add_argument("--resume", default=None, metavar="RUN_ID",
                     help="continue the run RUN_ID (under --runs-dir) in its own directory after a preemption, a time "
                     "limit or a killed orchestrator: its own spec and program, attempts counting on, its checkpoints, "
                     "restart budget and failure history (flags given must agree with the run's, but --deadline, "
                     "and --workers N within the range of a run launched with --workers MIN:MAX: docs/elastic.md)")
    run.add_argument("--wait-for-resources", type=float, default=None, metavar="S",
                     help="when other runs on this machine lease the cores or GPUs this run needs (or wait for them "
                     "first: first come, first served), wait for them at most S seconds, then exit 2 naming the runs "
                     "that hold them (default: until free; 0: at once; docs/several-jobs.md)")
    run.add_argument("--threads-per-task", type=int, default=None,
                     help="TF intra-op threads per task (default: a training task's cores, docs/local.md)")
    run.add_argument("--no-pin", action="store_true", default=None,
                     help="do not pin each training task to its own cores (local and docker backends; "
                          "docs/local.md)")
    run.add_argument("--heartbeat-interval", type=float, default=None, help="seconds between heartbeats (default 1)")
    run.add_argument("--stop-timeout", type=float, default=10.0,
                     help="seconds from SIGTERM to SIGKILL when stopping tasks (default 10)")
    run.add_argument("--inject-fault", action="append", default=[], metavar="TASK:KIND@TRIGGER",
                     help="inject a fault, e.g. worker:1:kill@step=20 or worker:1:exit=3@step=5 "
                     "(kinds: kill, exit=N, raise, hang, stop, term, lose; triggers: step=N, time=S; repeatable)")
    sup = p.add_argument_group("supervision (see docs/failure-handling.md)")
    sup.add_argument("--restart-policy", action="append", default=[], metavar="[ROLE=]POLICY",
                     help="never | on-failure | exit-code, for every role or one (e.g. worker=on-failure); repeatable. "
                     "Default exit-code (evaluator: on-failure)")
    sup.add_argument("--max-restarts", type=int, default=None, help="restarts allowed for the whole job (default 3)")
    sup.add_argument("--restart-backoff", type=float, default=None,
                     help="seconds before the first restart, doubling each time up to 30 (default: the first "
                     "restart at once, then 1 s doubling)")
    sup.add_argument("--heartbeat-timeout", type=float, default=None,
                     help="a task past start-up silent this long is hung (default 4 s)")
    sup.add_argument("--stall-timeout", type=float, default=None,
                     help="a training task whose step does not advance this long is hung (default 60 s)")
    sup.add_argument("--startup-timeout", type=float, default=None,
                     help="a task not training or serving this long after its start is hung (default 180 s)")
    sup.add_argument("--deadline", type=float, default=None, help="fail the job after this many seconds (default none)")
    sup.add_argument("--success-policy", default=None, metavar="POLICY",
                     help="all-workers: every chief/worker must exit 0 (default under multi_worker_mirrored); "
                     "chief: the coordinator exiting 0 is enough (Kubeflow TFJob's default; always under "
                     "parameter_server)")
    sup.add_argument("--spares", type=int, default=None,
                     help="warm spare task processes kept ready (TensorFlow imported) once the job trains, so a "
                     "restart skips the cold start (default: as many as one restart needs; 0: none)")
    sup.add_argument("--preemption-grace", type=float, default=30.0, metavar="S",
                     help="on SIGTERM to the orchestrator (a preemption: Slurm, docker stop, a Kubernetes eviction), "
                     "the training tasks get S seconds to save at their next step before every task is stopped and "
                     "the job ends Preempted, exit 75 (default 30, inside Slurm's and Kubernetes' 30 s grace); also "
                     "how long a group restart after one MWMS worker's preemption waits for its peers to save and "
                     "exit")
    sup.add_argument("--preemption-exit-codes", default=None, metavar="CODES",
                     help="exit codes that mean 'preempted, state saved' (retried under every policy but never, not "
                     "counted against --max-restarts; default 143,42: TF's restartable code and the exit 42 of its "
                     "PreemptionCheckpointHandler off Google Cloud)")
    sup.add_argument("--continue", action="store_true", dest="continue_run",
                     help="Slurm batch job: SIGUSR1 (the warning `#SBATCH --signal=B:USR1@N` sends N s before the "
                     "time limit; `sbatch --continue` writes it) saves as a preemption does, then requeues this job "
                     "(scontrol requeue) so that its next run continues the run: a run longer than the partition's "
                     "time limit is one job")
    sup.add_argument("--finish-timeout", type=float, default=None,
                     help="a task that reported the end of training and has not exited this long after is hung "
                     "(default none: post-training work is never a stall)")
    sup.add_argument("--allow-cluster-mismatch", action="store_true", default=None,
                     help="a training task whose strategy formed another cluster than the planned one "
                     "(replicas_in_sync 1 with 2 workers planned: a program that built its own) is a warning, "
                     "not a failed job (default: it fails the job under multi_worker_mirrored)")
    sup.add_argument("--evaluator-grace", type=float, default=None, metavar="S",
                     help="after the job succeeded, the evaluator gets S seconds to evaluate the last checkpoint "
                     "before it is stopped and its final evaluation is reported lost (default 120)")
    sup.add_argument("--crash-loop-limit", type=int, default=None, metavar="N",
                     help="a task failing with the same exception line on N consecutive attempts is not restarted "
                     "again (a crash loop; default 3, 0: never)")
    sup.add_argument("--exit-grace", type=float, default=None, metavar="S",
                     help="a task that said it finished (done, or exiting after training ended) and is still alive S "
                     "seconds later is stuck in its exit: killed, counted as succeeded, with a warning (default 30)")
    sup.add_argument("--on-nan", default=None, choices=("warn", "fail"),
                     help="a non-finite loss (or --nan-metrics metric) in a task's report: warn (default: a warning "
                     "naming the task and the first step; training goes on) or fail (the job fails at once, "
                     "without a restart, which would meet it again)")
    sup.add_argument("--nan-metrics", default=None, metavar="NAMES",
                     help="reported metrics checked for NaN / infinity like the loss, comma-separated "
                     "(e.g. grad_norm,val_loss; default none)")
    sup.add_argument("--max-log-size", default=None, metavar="SIZE",
                     help="cap of each task's stdout.log and stderr.log (K, M, G; default 256M): past it the "
                     "middle is cut, its first quarter and its end kept, and the summary says how much")
    add_backend_arguments(p)
    out = p.add_argument_group("output")
    out.add_argument("--plain", action="store_true", help="plain progress lines instead of the live table")
    out.add_argument("--quiet", action="store_true", help="print only the final report")
    out.add_argument("--json", action="store_true", help="print only summary.json on stdout")
    out.add_argument("--dry-run", action="store_true",
                     help="print the plan (TF_CONFIG, command, env of every task) and exit")
    p.add_argument("--insecure", action="store_true",
                   help="plaintext on the orchestrator's gRPC endpoint (the job token only), instead of mutual TLS "
                   "with the run's own certificates (docs/security.md)")
    web = p.add_argument_group("web page and metrics (see docs/watching.md)")
    web.add_argument("--web", default=None, metavar="[HOST:]PORT",
                     help="serve a live page of the job and Prometheus /metrics there (host 127.0.0.1 unless given; "
                     "port 0: any free port); the URL with its token is printed at the start")
    web.add_argument("--web-public", action="store_true",
                     help="allow a --web host that is not loopback (0.0.0.0, a routable address): plain HTTP, "
                     "the token travels in clear")
    web.add_argument("--web-linger", type=float, default=10.0, metavar="S",
                     help="after the job ended, keep serving until open pages have its final state, at most S seconds "
                     "(default 10; returns at once when no page is open)")


def spec_from_args(args: argparse.Namespace) -> JobSpec:
    """Build the job spec from ``--spec FILE`` (if given) and the launch flags.

    Flags given explicitly override the file's fields; flags left out keep them (their
    argparse default is None), and fields in neither take the defaults.

    Raises:
        SpecError: naming the bad flag or field.
    """
    api.check_run_id(args.run_id, "run-id")  # first, as before the spec file is read
    raw = read_spec_file(args.spec) if args.spec else {}
    if getattr(args, "resume", None) is not None:
        plan = _resumable(args)
        return resumed_spec(plan, merge(raw, overrides_from_flags(args)))
    return build_spec(raw, overrides_from_flags(args))


def _resumable(args: argparse.Namespace) -> dict:
    """The plan of the run ``--resume`` names, once it is known to be resumable (exit 2 otherwise)."""
    run_id = args.resume
    api.check_run_id(run_id, "resume")
    if args.run_id is not None and args.run_id != run_id:
        raise SpecError("run-id", args.run_id, f"differs from --resume {run_id}",
                        "drop --run-id: --resume names the run")
    return check_resumable(RunDir.of(args.runs_dir, run_id), args.runs_dir)


def run_launch(args: argparse.Namespace) -> int:
    """Run ``launch``. Returns the exit code (0, 1, 2, 3, 75 or 130)."""
    spec = spec_from_args(args)
    if args.web is not None:
        parse_bind(args.web, allow_public=args.web_public)  # bad input before anything, --dry-run too
    if not 0 <= args.web_linger <= 3600:
        raise SpecError("web-linger", args.web_linger, "must be a number of seconds in [0, 3600]",
                        "e.g. --web-linger 10")
    if not 0 < args.stop_timeout < 3600:  # also rejects nan and inf
        raise SpecError("stop-timeout", args.stop_timeout, "must be a number of seconds in (0, 3600)",
                        "e.g. --stop-timeout 10")
    if args.replicas is not None and spec.strategy is not Strategy.MIRRORED:
        raise SpecError("replicas", args.replicas, f"{spec.strategy.value} has one replica per task",
                        "drop --replicas (it is for --strategy mirrored), or change --workers")
    if getattr(args, "command_argv", None) == [] and getattr(args, "program_separator", False):
        raise SpecError("--", "", "no program after --", "write the program to run, e.g. -- python train.py")
    command = list(getattr(args, "command_argv", None) or [])
    check_program(command, args.backend)
    commands = {t: command for t in ("chief", "worker", "ps", "evaluator")} if command else None
    if args.resume is not None:
        commands = resumed_program(_resumable(args), commands)
        args.run_id = args.resume
    if args.wait_for_resources is not None and not 0 <= args.wait_for_resources < float("inf"):
        raise SpecError("wait-for-resources", args.wait_for_resources, "must be a number of seconds >= 0",
                        "e.g. --wait-for-resources 600, or 0 to refuse at once; leave it out to wait until free")
    if not 0 < args.preemption_grace <= 3600:
        raise SpecError("preemption-grace", args.preemption_grace, "must be a number of seconds in (0, 3600]",
                        "e.g. --preemption-grace 30")
    check_continue(args)
    faults = [Fault.parse(text) for text in args.inject_fault]
    if args.dry_run:
        plan = api.dry_run(spec, runs_dir=args.runs_dir, run_id=args.run_id, faults=faults, commands=commands,
                           backend=args.backend, backend_options=backend_options(args))
        print_warnings(plan.warnings)
        print(jsontext.dumps(plan.to_dict(), indent=2))
        return 0

    view: View | None
    if args.quiet or args.json:
        view = QuietView()
    elif args.plain or not sys.stdout.isatty():
        view = LinesView()
    else:
        view = None
    first_started, held = threading.Event(), []

    def on_signal(signum, _frame):
        if job is None:  # preparing
            if first_started.is_set():  # the first tasks run: held until the job exists, then taken as below
                held.append(signum)
                return
            if signum == signal.SIGINT:  # nothing started: as before any handler
                raise KeyboardInterrupt
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if signum == signal.SIGTERM:  # a preemption (Slurm, docker stop, an eviction): save and leave
            job.request_preemption("SIGTERM to the orchestrator")
        else:
            job.request_stop(f"interrupted by {signal.Signals(signum).name}")

    # closing the terminal (SIGHUP) or Ctrl-\\ (SIGQUIT) must not lose the summary: handled as Ctrl-C (torchrun too);
    # installed before the first tasks start (in prepare)
    previous: dict[int, Any] = {s: signal.signal(s, on_signal)
                                for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)}
    job = None
    try:
        job = api.prepare(spec, runs_dir=args.runs_dir, run_id=args.run_id, faults=faults, view=view, commands=commands,
                          stop_timeout_s=args.stop_timeout, backend=args.backend, backend_options=backend_options(args),
                          web=args.web, web_public=args.web_public, resume=args.resume is not None,
                          preemption_grace_s=args.preemption_grace, wait_for_resources_s=args.wait_for_resources,
                          insecure=args.insecure, start_early=True,  # the first tasks start in it: run takes them over
                          first_wave_started=first_started, certificates=getattr(args, "certificates", None))
    except BaseException:
        for s, handler in previous.items():
            signal.signal(s, handler)
        raise
    started()  # the collector as before (cli.main held it back while the start imported its modules)
    for signum in held:  # a signal that came while the first tasks started: the job takes it now
        on_signal(signum, None)
    if args.insecure:
        print("warning: --insecure: the orchestrator's endpoint takes plaintext gRPC; anyone on its network path "
              "can read the job token", file=sys.stderr, flush=True)
    print_warnings(job.plan.warnings)
    if job.plan.placement.any and not args.json:
        print(job.plan.placement.describe(), flush=True)
    if (job.plan.cpus.pinned or job.plan.cpus.nodes) and not args.json:
        print(job.plan.cpus.describe(), flush=True)
    if job.web_url is not None:
        print(f"web page and /metrics: {job.web_url}", file=sys.stderr if args.json else sys.stdout, flush=True)
    if view is None:
        shown: View = TableView()
        job.recorder.view = shown
    else:
        shown = view
    if isinstance(view, LinesView):
        spec = job.plan.spec  # elastic workers: the size placed (docs/elastic.md)
        what = (f", global batch {spec.global_batch_size}" if job.plan.user_program is None
                else f", program {' '.join(job.plan.user_program)}")
        held_now = job.plan.held  # PSS below MAX: planned, started by a grow
        tasks = ", ".join(t.name + (" (held)" if t.name in held_now else "") for t in spec.tasks())
        print(f"run {job.plan.run_id}: {spec.strategy.value}, tasks {tasks}{what}; logs in {job.plan.run_dir}",
              flush=True)
    carried = job.supervisor.carried
    if carried.resumed:
        last = carried.lives[-1]
        step = f" at step {last.last_step}" if last.last_step is not None else ""
        print(f"resuming run {job.plan.run_id}, life {len(carried.lives) + 1}: life {len(carried.lives)} ended "
              f"{last.ended} ({last.cause}){step}; training continues from the last checkpoint in "
              f"{job.plan.run_dir / 'backup'}", file=sys.stderr if args.json else sys.stdout, flush=True)

    slurm = SlurmContinuation(args.continue_run, args.backend)

    def phases() -> list[str]:
        snapshot = job.recorder.snapshot()
        return [t.heartbeat.phase for t in (snapshot.tasks if snapshot is not None else ())
                if t.heartbeat is not None and t.task.task_type in ("chief", "worker")]

    # --continue: SIGUSR1, the time limit's warning
    previous.update(slurm.install(job.request_preemption, phases, sys.stderr if args.json else sys.stdout))
    try:
        result, summary = api.run(job, keep_web=True)
    finally:
        shown.close()
        for s, handler in previous.items():
            signal.signal(s, handler)
    if args.json:
        print(jsontext.dumps(summary, indent=2))
    else:
        from orchestrator.report.summary import format_final

        print(format_final(summary), flush=True)
    try:
        api.close_web(job, args.web_linger)  # open pages get the final state first
    except KeyboardInterrupt:
        api.close_web(job)
    slurm.after(result.exit_code == EXIT_PREEMPTED, job.plan.run_id)  # Slurm: requeue the job to continue the run
    return api.exit_code(result)
