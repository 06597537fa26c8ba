"""The batch facts of elastic workers in the built-in program (docs/elastic.md).

With ``--workers MIN:MAX`` the orchestrator gives each task its batch facts at the job's size
(:func:`orchestrator.taskenv.elastic_env`): ``ORCH_GLOBAL_BATCH_SIZE`` (under ``keep-global``
the same at every size, so step k covers the same examples and a checkpoint's (epoch, step)
index stays valid) and ``ORCH_LEARNING_RATE_FACTOR``. The program batches its dataset with the
global batch, splits it among the replicas its strategy formed, and shards by DATA (never by
FILE: which files a worker reads would change with the size).
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Mapping

from orchestrator import env
from orchestrator.spec.model import TrainingSpec


def is_elastic(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the job's workers are elastic (``ORCH_WORKERS_MIN`` is set)."""
    return env.is_set(env.WORKERS_MIN, environ)


def elastic_options(options: TrainingSpec, replicas: int, environ: Mapping[str, str] | None = None) -> TrainingSpec:
    """``options`` at this size: ``batch_size_per_replica`` = ``ORCH_GLOBAL_BATCH_SIZE`` / ``replicas``
    (the replicas in sync the strategy formed), the learning rate times ``ORCH_LEARNING_RATE_FACTOR``;
    ``options`` unchanged without elastic workers. A global batch the replicas cannot share evenly
    (a strategy that formed another cluster than planned: the supervisor's cluster check says so)
    keeps the planned per-replica batch, with a warning on stderr.

    Raises:
        ValueError: a variable that is not a number.
    """
    global_batch = env.read_int(env.GLOBAL_BATCH_SIZE, 0, environ)
    if not global_batch:
        return options
    per_replica = env.read_int(env.PER_REPLICA_BATCH_SIZE, options.batch_size_per_replica, environ)
    if global_batch % max(1, replicas) == 0:
        per_replica = global_batch // max(1, replicas)
    else:
        print(f"warning: the global batch {global_batch} cannot be split among {replicas} replicas in sync; "
              f"training with {per_replica} per replica", file=sys.stderr, flush=True)
    factor = float(env.read(env.LEARNING_RATE_FACTOR, "1.0", environ) or 1.0)
    return dataclasses.replace(options, batch_size_per_replica=per_replica,
                               learning_rate=options.learning_rate * factor)


SAVED_FACTS_FILE = "elastic-batch.json"
"""In the job's backup directory: ``{"global_batch_size", "steps_per_epoch"}`` of the life that wrote
its checkpoints (the chief writes it once every worker is past its restore: after the first step)."""


def converted_position(epoch: int, batch: int, before: tuple[int, int], now: tuple[int, int]) -> tuple[int, int]:
    """tf-keras ``BackupAndRestore``'s saved ``(epoch, batch)`` index at ``before`` = (global batch,
    steps per epoch) as the index at ``now`` that has seen the same examples (rounded down: the
    examples of a partial step are trained again). ``batch`` is the last batch done in ``epoch``
    (-1: none of it). Under ``keep-per-replica`` a resume at another size changes the global batch,
    so step k at batch G is k x G examples (docs/elastic.md).

    Returns:
        ``(epoch, batch)`` at ``now``: ``batch`` the last batch done, ``steps_per_epoch - 1`` at an
        epoch's end (tf-keras then continues at the next epoch's batch 0).
    """
    (old_global, old_spe), (new_global, new_spe) = before, now
    steps = epoch * old_spe + batch + 1
    step = steps * old_global // new_global
    if step == 0:
        return 0, -1
    return (step - 1) // new_spe, (step - 1) % new_spe


def converted_step(step: int, saved_global_batch: int, global_batch: int) -> int:
    """The custom loop's restored global ``step``, saved at ``saved_global_batch`` examples a step, as the step at
    ``global_batch`` that has seen the same examples (rounded down: a partial step is trained again). Under
    ``keep-per-replica`` a size change changes the global batch (docs/elastic.md); ``saved_global_batch`` 0 (a
    checkpoint that does not say) or the same batch: ``step`` unchanged."""
    if saved_global_batch <= 0 or saved_global_batch == global_batch or global_batch <= 0:
        return step
    return step * saved_global_batch // global_batch


def read_saved_facts(backup_dir: str) -> tuple[int, int] | None:
    """``(global batch, steps per epoch)`` of the checkpoints in ``backup_dir``; None when unknown."""
    import json
    import os

    try:
        with open(os.path.join(backup_dir, SAVED_FACTS_FILE), encoding="utf-8") as fh:
            facts = json.load(fh)
        return int(facts["global_batch_size"]), int(facts["steps_per_epoch"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_saved_facts(backup_dir: str, global_batch: int, steps_per_epoch: int) -> None:
    """Record the facts of this life's checkpoints (atomically: a temp file renamed)."""
    import json
    import os

    os.makedirs(backup_dir, exist_ok=True)
    path = os.path.join(backup_dir, SAVED_FACTS_FILE)
    with open(path + ".tmp", "w", encoding="utf-8") as fh:
        json.dump({"global_batch_size": global_batch, "steps_per_epoch": steps_per_epoch}, fh)
    os.replace(path + ".tmp", path)
