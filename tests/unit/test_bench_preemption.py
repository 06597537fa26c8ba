"""The preemption section's log readers (``bench/preemption.py``): when the bench SIGTERMs the
orchestrator, and which step each worker saved its preemption checkpoint after."""

from __future__ import annotations

from bench.preemption import ORCHESTRATOR, once_in_epoch, phases, saved_steps


def _log(run_dir, worker: str, text: str, attempt: int = 0) -> None:
    out = run_dir / f"attempt-{attempt}" / worker / "stdout.log"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)


def test_the_orchestrator_is_signalled_once_worker_0_starts_epoch_2(tmp_path):
    when = once_in_epoch(2)
    assert when(tmp_path, []) is None  # no log yet
    _log(tmp_path, "worker-0", "Epoch 1/4\nbench: first step 1 done (unix 5.0)\n")
    _log(tmp_path, "worker-1", "Epoch 2/4\n")  # worker-1's log does not count
    assert when(tmp_path, []) is None
    _log(tmp_path, "worker-0", "Epoch 1/4\nEpoch 2/4\n")
    assert when(tmp_path, []) == ORCHESTRATOR


def test_saved_steps_per_worker_and_the_start_phases(tmp_path):
    _log(tmp_path, "worker-0", "preempted (SIGTERM from outside): checkpoint saved after step 48; exiting with code "
         "143\n")
    _log(tmp_path, "worker-1", "Epoch 2/4\n")
    _log(tmp_path, "worker-0", "checkpoint saved after step 99\n", attempt=1)  # another attempt: not read
    assert saved_steps(tmp_path) == {"worker-0": 48, "worker-1": None}
    _log(tmp_path, "worker-0", "bench: mark train (unix 101.5)\nbench: mark imported (unix 108.25)\n", attempt=2)
    assert phases(tmp_path / "attempt-2" / "worker-0" / "stdout.log", 100.0) == {"train": 1.5, "imported": 8.25}
    assert phases(tmp_path / "missing.log", 0.0) == {}
