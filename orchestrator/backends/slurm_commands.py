"""The Slurm client commands the Slurm backend runs for one job: ``scontrol``, ``squeue``, ``scancel``,
``srun`` probes, and TCP probes of a node's ``slurmd`` (each bounded)."""

from __future__ import annotations

import logging
import os
import secrets
import signal as signals
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Sequence

from orchestrator.backends.slurm_step import COMMAND_TIMEOUT_S, PROBE_TIMEOUT_S, SlurmStep
from orchestrator.errors import LaunchError, SpecError
from orchestrator.spec.dataservice import DataServiceSpec

log = logging.getLogger("orchestrator.backends.slurm")


def command(environ: dict[str, str], *argv: str,
            timeout_s: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Run a Slurm client command (``argv``) with ``environ``, bounded by ``timeout_s`` seconds.

    Raises:
        LaunchError: the command is not installed, or did not answer in time.
    """
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, env=environ)
    except FileNotFoundError:
        raise LaunchError(f"{argv[0]} not found: install the Slurm client commands (slurm-client)") from None
    except subprocess.TimeoutExpired:
        raise LaunchError(f"{' '.join(argv[:3])} did not answer within {timeout_s:g} s") from None


def route_source(node_host: str, port: int) -> str:
    """This machine's address on the route to ``node_host`` (UDP connect: nothing is sent)."""
    try:
        target = socket.gethostbyname(node_host)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((target, port))
            return str(probe.getsockname()[0])
    except OSError as exc:
        raise LaunchError(f"no route to node {node_host} for the health endpoint: {exc}; "
                          "give --health-host ADDRESS") from None


def check_shared(environ: dict[str, str], nodes: list[str], run_id: str, runs_dir: Path, *,
                 field: str = "runs-dir", fix: str = "put --runs-dir on a file system every node mounts (NFS, "
                 "Lustre, ...)") -> None:
    """Write a file into ``runs_dir`` here and read it on every node of ``nodes`` (one job step of run ``run_id``).

    Args:
        field, fix: what the error names (the runs directory; the tf.data service's ``work_dir``).

    Raises:
        SpecError: a node cannot read it (the directory is not on a shared file system), or it
            cannot be made here.
        LaunchError: the step could not run.
    """
    try:
        runs_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(field, str(runs_dir), f"cannot be made here: {exc.strerror or exc}", fix) from None
    token = secrets.token_hex(8)
    probe = runs_dir / f".shared-check-{run_id}-{token}"
    probe.write_text(token, encoding="utf-8")
    try:
        result = command(
            environ, "srun", "--overlap", f"--nodes={len(nodes)}", f"--ntasks={len(nodes)}", "--ntasks-per-node=1",
            "-w", ",".join(nodes), "--job-name", f"{run_id}:shared-check", "--quiet", "--label",
            "sh", "-c", f'cat "{probe}" 2>/dev/null || echo missing', timeout_s=60.0)
    finally:
        probe.unlink(missing_ok=True)
    seen = {}
    for line in result.stdout.splitlines():
        rank, _, text = line.partition(":")
        if rank.strip().isdigit():
            seen[int(rank.strip())] = text.strip()
    bad = [nodes[r] for r in range(len(nodes)) if seen.get(r) != token]
    if result.returncode != 0 and len(seen) < len(nodes):
        raise LaunchError(f"could not run a step on every node to check the runs directory: "
                          f"{result.stderr.strip()[-300:]}")
    if bad:
        raise SpecError(field, str(runs_dir), f"is not shared: node(s) {', '.join(bad)} cannot read a file "
                        "written here", fix)


def check_work_dir(environ: dict[str, str], nodes: list[str], run_id: str, runs_dir: Path,
                   service: DataServiceSpec | None) -> None:
    """The tf.data service's ``work_dir`` (the dispatcher's journal; a dispatcher restarted on
    another node must read it) must be shared by every node: under ``runs_dir`` (checked shared
    when the backend opened), or read back on every node here (:func:`check_shared`). Relative
    paths are the steps' (``srun --chdir`` this directory).

    Raises:
        SpecError: naming ``data_service.work_dir``, when a node cannot read a file written there.
        LaunchError: the probe step could not run.
    """
    if service is None or service.work_dir is None:
        return
    work_dir = Path(service.work_dir).resolve()
    if work_dir.is_relative_to(runs_dir.resolve()):
        return
    check_shared(environ, nodes, run_id, work_dir, field="data_service.work_dir",
                 fix="put the dispatcher's journal on a file system every node mounts, or leave work_dir out "
                     "(the run directory's data-service/)")


def step_ids(environ: dict[str, str], job_id: str) -> dict[str, str]:
    """Step name -> ``JOB.STEP`` of job ``job_id``'s steps now (``squeue -s``)."""
    result = command(environ, "squeue", "-h", "-s", "-j", job_id, "-o", "%i %j")
    ids = {}
    for line in result.stdout.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2:
            ids[parts[1].strip()] = parts[0]
    return ids


def resolve(environ: dict[str, str], job_id: str, steps: Sequence[SlurmStep]) -> None:
    """Fill in the step ids still unknown (one ``squeue`` per job: ``job_id``, or a step's own
    extension allocation's)."""
    for job in dict.fromkeys(s.job_id or job_id for s in steps if not s.step_id):
        try:
            ids = step_ids(environ, job)
        except LaunchError as exc:
            log.warning("%s", exc)
            continue
        for s in steps:
            if (s.job_id or job_id) == job:
                s.step_id = s.step_id or ids.get(s.step_name, "")


def signal_steps(environ: dict[str, str], job_id: str, steps: Sequence[SlurmStep], signum: int) -> None:
    """``scancel --signal`` to the steps that still run (one command); steps not yet known to
    Slurm get the signal through their ``srun`` (which forwards it, or dies of it)."""
    live = [s for s in steps if s.popen is not None and s.popen.poll() is None]
    if not live:
        return
    resolve(environ, job_id, live)
    if signum == signals.SIGKILL:
        now = time.monotonic()
        for s in live:
            s.killed_at = s.killed_at or now
    known = [s.step_id for s in live if s.step_id]
    name = signals.Signals(signum).name.removeprefix("SIG")
    if known:  # on a thread: slurmctld answers only once it reached the node (MessageTimeout when it is lost)
        threading.Thread(target=_scancel, args=(environ, name, known), name="scancel", daemon=True).start()
    for s in live:
        if not s.step_id:
            try:
                os.killpg(s.pid, signum)
            except (ProcessLookupError, PermissionError):
                pass


def _scancel(environ: dict[str, str], name: str, step_ids: list[str]) -> None:
    try:
        result = command(environ, "scancel", f"--signal={name}", *step_ids)
        if result.returncode != 0:
            log.debug("scancel --signal=%s %s: %s", name, " ".join(step_ids), result.stderr.strip())
    except LaunchError as exc:
        log.warning("%s", exc)


def node_answers(address: str, port: int) -> bool:
    """True when the node's slurmd (at ``address``, ``port``) accepts a TCP connection within
    :data:`~orchestrator.backends.slurm_step.PROBE_TIMEOUT_S`."""
    try:
        with socket.create_connection((address, port), PROBE_TIMEOUT_S):
            return True
    except OSError:
        return False
