"""Real TensorFlow jobs, orchestrated (``python -m orchestrator launch``) or hand-launched.

Both sides run the same task programs (``python -m worker``, ``python -m ps``) with the
same thread limits; with ``BENCH_TIMING=1`` the worker prints the same two markers on
both sides (``worker/progress.py``): ``bench: first step N done (unix T)`` and
``bench: epoch E done at step S (unix T)``. The hand-launched side writes TF_CONFIG by
hand, sets no ``ORCH_HEALTH_ADDRESS`` (the heartbeat reporter is then a no-op:
``HeartbeatReporter.start`` returns at once) and stops PSS workers and ps itself.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable

_FIRST = re.compile(r"bench: first step (\d+) done \(unix ([\d.]+)\)")
_EPOCH = re.compile(r"bench: epoch (\d+) done at step (\d+) \(unix ([\d.]+)\)")
_BATCH = re.compile(r"global batch (\d+)")
# a fault the job's gate handed over (a PSS worker's, a ps's) ends "(unix T; handed over at job step S)"
_FAULT = re.compile(r"injecting fault: (\w+) at step=(\d+) \(unix ([\d.]+)(?:; handed over at job step \d+)?\)")
ORCHESTRATOR = "orchestrator"  # what a ``kill_when`` returns to signal the orchestrator process itself


def base_env() -> dict[str, str]:
    """This environment without any orchestrator variable, with the repo importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_") and k != "TF_CONFIG"}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["BENCH_TIMING"] = "1"
    return env


@dataclass
class TaskLog:
    """What one task attempt printed: first-step time, epoch ends, global batch, faults."""

    first_step: tuple[int, float] | None = None
    epochs: list[tuple[int, int, float]] = field(default_factory=list)
    global_batch: int | None = None
    fault: tuple[str, int, float] | None = None

    @classmethod
    def read(cls, path: Path) -> "TaskLog":
        log = cls()
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return log
        if m := _FIRST.search(text):
            log.first_step = (int(m[1]), float(m[2]))
        log.epochs = [(int(e), int(s), float(t)) for e, s, t in _EPOCH.findall(text)]
        if m := _BATCH.search(text):
            log.global_batch = int(m[1])
        if m := _FAULT.search(text):
            log.fault = (m[1], int(m[2]), float(m[3]))
        return log

    def examples_per_second(self, skip_epochs: int = 1) -> float | None:
        """Median examples/s of the epochs after the first ``skip_epochs`` (warm-up excluded).

        Per-epoch rates and their median, not the mean over the whole span: a burst of load
        from another process on this shared machine spoils one epoch, not the figure.
        """
        if self.global_batch is None or len(self.epochs) < skip_epochs + 1:
            return None
        rates = [(s1 - s0) * self.global_batch / (t1 - t0)
                 for (_, s0, t0), (_, s1, t1) in zip(self.epochs[skip_epochs - 1:], self.epochs[skip_epochs:])
                 if t1 > t0]
        return statistics.median(rates) if rates else None


@dataclass
class Topology:
    """A cluster shape: ``mwms2`` (2 workers) or ``pss`` (chief + workers + ps)."""

    name: str
    strategy: str
    chief: int
    workers: int
    ps: int
    epochs: int

    def tasks(self) -> list[tuple[str, int]]:
        return ([("chief", 0)] * self.chief + [("worker", i) for i in range(self.workers)]
                + [("ps", i) for i in range(self.ps)])

    @property
    def coordinator(self) -> str:
        return "chief-0" if self.chief else "worker-0"

    def launch_args(self) -> list[str]:
        if self.strategy == "parameter_server":
            return ["--strategy", "parameter_server", "--workers", str(self.workers), "--ps", str(self.ps),
                    "--epochs", str(self.epochs)]
        return ["--workers", str(self.workers), "--epochs", str(self.epochs)] + (["--chief"] if self.chief else [])


@dataclass
class RunResult:
    """One job run: where it ran, when it was launched, what its coordinator printed."""

    side: str
    run_dir: Path
    launch_unix: float
    exit_code: int | None
    wall_s: float
    coordinator: TaskLog
    summary: dict | None = None
    events: list[tuple[float, str]] = field(default_factory=list)
    samples: list[dict] = field(default_factory=list)
    maps_tensorflow: bool | None = None
    killed_at: float | None = None

    def first_step_s(self) -> float | None:
        return None if self.coordinator.first_step is None else self.coordinator.first_step[1] - self.launch_unix


def free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports (bound then released: what a user's script does)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def run_orchestrated(workdir: Path, run_id: str, args: list[str], coordinator: str, sample_s: float = 0.0,
                     timeout_s: float = 600.0, kill_when=None, kill_signal: int = signal.SIGKILL,
                     stop_when=None) -> RunResult:
    """``python -m orchestrator launch --plain ...`` in a subprocess; event lines timestamped as they
    arrive; with ``sample_s`` > 0 the orchestrator's CPU times and RSS are sampled that often.

    ``kill_when(run_dir, events)``, polled every 0.05 s while the job runs, returns the pid of a
    task to send ``kill_signal`` (SIGKILL by default) once, or :data:`ORCHESTRATOR` for the
    orchestrator process itself (None: not yet); the signal's Unix time is ``RunResult.killed_at``.
    ``stop_when(run_dir, events)``, polled likewise after the kill, returns True once the run has
    shown what it was run for: the orchestrator then gets SIGINT (Ctrl-C: every task stopped, exit
    130), so a job is long enough by construction and still ends as soon as it is measured."""
    cmd = [PY, "-m", "orchestrator", "launch", "--plain", "--runs-dir", str(workdir), "--run-id", run_id, *args]
    launch = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO, env=base_env())
    events: list[tuple[float, str]] = []
    samples: list[dict] = []
    tf_mapped: list[bool] = []

    def read() -> None:
        for line in proc.stdout:
            events.append((time.time(), line.rstrip("\n")))

    def sample() -> None:
        try:
            p = psutil.Process(proc.pid)
            checked = False
            while proc.poll() is None:
                with p.oneshot():
                    ct = p.cpu_times()
                    samples.append({"t": time.time(), "cpu_s": ct.user + ct.system, "rss": p.memory_info().rss})
                if not checked and any("training step" in e for _, e in events[-3:]):
                    checked = True  # once tasks train: is any TensorFlow library mapped into the orchestrator?
                    tf_mapped.append(any("tensorflow" in m.path for m in p.memory_maps()))
                time.sleep(sample_s)
        except psutil.Error:
            pass

    killed: list[float] = []

    def killer() -> None:
        while proc.poll() is None:
            pid = kill_when(workdir / run_id, list(events))
            if pid:
                try:
                    os.kill(proc.pid if pid == ORCHESTRATOR else pid, kill_signal)
                    killed.append(time.time())
                except ProcessLookupError:
                    pass
                break
            time.sleep(0.05)
        while stop_when is not None and proc.poll() is None:
            if stop_when(workdir / run_id, list(events)):
                proc.send_signal(signal.SIGINT)
                return
            time.sleep(0.05)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    watcher = threading.Thread(target=killer, daemon=True) if kill_when else None
    if watcher:
        watcher.start()
    sampler = threading.Thread(target=sample, daemon=True) if sample_s > 0 else None
    if sampler:
        sampler.start()
    try:
        code = proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(60)
    wall = time.time() - launch
    reader.join(10)
    for thread in (sampler, watcher):
        if thread:
            thread.join(10)
    run_dir = workdir / run_id
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        summary = None
    return RunResult("orchestrated", run_dir, launch, code, wall,
                     TaskLog.read(run_dir / "attempt-0" / coordinator / "stdout.log"), summary, events, samples,
                     tf_mapped[0] if tf_mapped else None, killed[0] if killed else None)


def run_hand(workdir: Path, run_id: str, topo: Topology, timeout_s: float = 600.0) -> RunResult:
    """The baseline: a plain script starts every task with a hand-written TF_CONFIG, no health client."""
    run_dir = workdir / run_id
    run_dir.mkdir(parents=True)
    tasks = topo.tasks()
    ports = free_ports(len(tasks))
    cluster: dict[str, list[str]] = {}
    for (task_type, _), port in zip(tasks, ports):
        cluster.setdefault(task_type, []).append(f"127.0.0.1:{port}")
    threads = max(1, cores() // len(tasks))  # what a careful user does (and the orchestrator's default)
    training = {"batch_size_per_replica": 16, "data": None, "epochs": topo.epochs, "learning_rate": 0.005,
                "loop": "fit", "replicas": 2, "seed": 0, "steps_per_epoch": None}
    common = base_env()
    common.update({
        "TF_NUM_INTRAOP_THREADS": str(threads), "TF_NUM_INTEROP_THREADS": str(max(2, threads)),
        "OMP_NUM_THREADS": str(threads), "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "1",
        "PYTHONUNBUFFERED": "1",
        # the built-in program's own inputs (the same values the orchestrator passes)
        "ORCH_STRATEGY": topo.strategy, "ORCH_TRAINING": json.dumps(training, sort_keys=True),
        "ORCH_RUN_DIR": str(run_dir), "ORCH_BACKUP_DIR": str(run_dir / "backup"),
        "ORCH_MODEL_DIR": str(run_dir / "model"),
    })
    if topo.strategy == "parameter_server":
        common["GRPC_FAIL_FAST"] = "use_caller"
    launch = time.time()
    procs: dict[str, subprocess.Popen] = {}
    events: list[tuple[float, str]] = []  # the orchestrator's "started" lines, for bench/timeline.py
    for task_type, index in tasks:
        name = f"{task_type}-{index}"
        task_dir = run_dir / "attempt-0" / name
        task_dir.mkdir(parents=True)
        env = {**common, "ORCH_TASK_DIR": str(task_dir),
               "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})}
        module = "ps" if task_type == "ps" else "worker"
        with open(task_dir / "stdout.log", "wb") as out, open(task_dir / "stderr.log", "wb") as err:
            procs[name] = subprocess.Popen([PY, "-m", module], env=env, cwd=REPO, stdin=subprocess.DEVNULL,
                                           stdout=out, stderr=err, start_new_session=True)
        events.append((time.time(), f"{name} started (pid {procs[name].pid}, attempt 0)"))
    code = None
    try:
        code = procs[topo.coordinator].wait(timeout_s)
        if topo.strategy != "parameter_server":
            for p in procs.values():
                p.wait(timeout_s)
    finally:
        for p in procs.values():  # PSS workers and ps serve forever: stop them, as the user must
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
    wall = time.time() - launch
    return RunResult("hand", run_dir, launch, code, wall,
                     TaskLog.read(run_dir / "attempt-0" / topo.coordinator / "stdout.log"), events=events)


def precompile() -> None:
    """Byte-compile the repository's packages once (``compileall``; it writes even under
    ``PYTHONDONTWRITEBYTECODE``, which stops Python from caching what it compiles): without it,
    such an environment compiles every module again at every start of the orchestrator and of
    each task (~0.15 s of CPU for the orchestrator alone), which an installed package never does
    (pip byte-compiles at install). Both sides of a pair start from the same bytecode."""
    import compileall

    for package in ("orchestrator", "worker", "ps", "bench"):
        compileall.compile_dir(str(REPO / package), quiet=1)


def warm_up() -> None:
    """Import TensorFlow and tf-keras once in a process of their own, untimed, before the first
    measured launch (hyperfine's ``--warmup``). After the machine has been idle the kernel may
    have dropped TensorFlow's ~1 GB of shared libraries from the page cache (the 2-core host of
    bench/results pages out what nobody touched for ~60 s: a DAMON ``pageout`` scheme, min age
    12 x 5 s), and the first process to import it then reads them from disk. That process is
    always the first pair's orchestrated side (``Suite.tf``), whose launch -> first step then
    carries disk reads that the hand-launched side after it does not. A failed import shows in
    the measured runs; raises ``subprocess.TimeoutExpired`` after 300 s."""
    subprocess.run([PY, "-c", "import tensorflow, tf_keras"], env=base_env(), cwd=REPO, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
