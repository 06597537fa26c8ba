"""What a size change of an elastic job means (issue 34, docs/elastic.md): pure rules.

* :func:`size_change`: the target size, which worker slots go or come back, and the cause
  (``resize asked``, ``slot lost``, ``grew back``), for MultiWorkerMirroredStrategy (the group
  restarts at the new size: TF fixes an MWMS group's size when the strategy is built, so a
  resize is new processes with a new ``TF_CONFIG``) and for ParameterServerStrategy (the
  ``ClusterCoordinator`` carries on without a worker: specific workers are parked and unparked,
  the others keep running; a grow past the cluster the job started with needs a coordinator with
  a new ``TF_CONFIG``: where this life planned the slots (a job started below MAX plans every slot up
  to MAX and holds the ones above its start), only the coordinator restarts, from its save, the new
  workers started beside the running ps and workers; otherwise the run continues in a next life at the
  new size from the coordinator's save).
* :func:`slot_lost`: whether a worker's end was its slot withdrawn (an injected ``lose``).
* :func:`node_lost`: whether a worker's node is lost (the backend says so: Slurm's slurmd does
  not answer, or the step did not end after SIGKILL), and the size change it makes (MWMS: one
  smaller from the last checkpoint; PSS: that worker parked).
* :func:`grow_back_at`: when a withdrawn slot may be taken back by itself, after a cooldown that
  doubles with each loss in a window, so a flapping node does not restart the group over and
  over (torchrun's ``--max-restarts`` bounds the same churn by count; the doubling is the
  exponential backoff Kubernetes applies to a crash-looping container).
* :func:`grow_back_to`: the size an MWMS job running below MAX grows back to by itself now, when
  the machine has room again (``--grow-back``), or None: after a cooldown since its last size
  change, never into a slot lost and not given back, never to a size its batch policy refuses.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

RESIZE_ASKED = "resize asked"
SLOT_LOST = "slot lost"
GREW_BACK = "grew back"
NODE_LOST = "node lost"
CAUSES = (RESIZE_ASKED, SLOT_LOST, GREW_BACK, NODE_LOST)
"""``cause`` of a size change (and of the ``segments`` entry it begins)."""

MWMS, PSS = "multi_worker_mirrored", "parameter_server"


@dataclass(frozen=True)
class SizeChange:
    """What a size change does.

    Attributes:
        workers: the size after it (worker tasks).
        going: worker slots (indexes of the size before) that leave; under MWMS the group is
            renumbered 0..workers-1 afterwards, the chief (worker 0) kept.
        coming: worker slots that come (back).
        cause: one of :data:`CAUSES`.
        restart_group: MWMS: every worker saves and the group restarts at the new size. PSS: only
            for a grow past the cluster the job started with (a worker slot its ``TF_CONFIG`` does
            not have): the coordinator saves and the run continues in a next life at the new size,
            with a new ``TF_CONFIG``; otherwise False (``park`` / ``unpark`` name the workers, the
            rest keep running).
        restart_coordinator: PSS: a grow past the cluster the coordinator's ``TF_CONFIG`` names into
            slots this life planned (held, not started): the coordinator saves and restarts alone with
            a ``TF_CONFIG`` naming ``workers`` workers, the ``coming`` ones started first; the ps and the
            other workers keep running (TF 2.21 lets them serve the new coordinator: docs/elastic.md).
        park: PSS: the workers to park (not restarted, not failed).
        unpark: PSS: the parked workers to start again (at their address).
        refusal: why nothing changes ("": it does); then the other fields keep the size before.
    """

    workers: int
    going: tuple[int, ...] = ()
    coming: tuple[int, ...] = ()
    cause: str = RESIZE_ASKED
    restart_group: bool = False
    restart_coordinator: bool = False
    park: tuple[int, ...] = ()
    unpark: tuple[int, ...] = ()
    refusal: str = ""


def size_change(strategy: str, active: Sequence[int], bounds: tuple[int, int], *, target: int | None = None,
                lost: int | None = None, parked: Sequence[int] = (), cause: str = RESIZE_ASKED,
                started: int | None = None, planned: int | None = None, moved: Sequence[int] = ()) -> SizeChange:
    """The size change of an elastic job's workers.

    Args:
        strategy: ``multi_worker_mirrored`` or ``parameter_server``.
        active: the worker slots training now (indexes, ascending).
        bounds: (MIN, MAX) of the job's workers.
        target: the size asked (``resize --workers N``); None for a lost slot.
        lost: the slot whose node or task is gone (an injected ``lose``); None for a request.
        parked: PSS: the slots parked now (lost or shrunk earlier), which a grow takes back first.
        cause: of a request: ``resize asked`` or ``grew back`` (a lost slot is ``slot lost``).
        started: PSS: the workers of the cluster this life started with (its ``TF_CONFIG``); None:
            the active and parked slots. A grow to a slot at or above it needs a new coordinator.
        planned: PSS: the worker slots this life planned (addresses reserved; those at or above
            ``started`` held, not started); None: ``started``. A grow past ``started`` within it
            restarts the coordinator alone (``restart_coordinator``); past it, a next life.
        moved: PSS: parked slots whose address is gone (their node lost, on Slurm): one taken back
            gets a new address, which the coordinator's ``TF_CONFIG`` lacks: a new coordinator too.

    Returns:
        A :class:`SizeChange`. A shrink drops the highest slots (worker 0, the chief and
        checkpoint writer, stays); a lost slot drops that slot; a grow takes back the parked
        slots lowest first, then new slots above the highest. Under PSS a grow that needs a new
        slot (one the started cluster does not have) restarts the coordinator with a new
        ``TF_CONFIG`` (``restart_group``; TF's coordinator only ever reconnects to the addresses of
        its first cluster): nothing is unparked then, the next life starts every slot; or, when every
        slot that comes is one this life planned (``planned``), ``restart_coordinator``: the coming
        slots start (parked ones at their addresses too) and the coordinator alone restarts. Refused
        (``refusal`` set, size unchanged): a target outside MIN..MAX, the size it is already, or a loss that leaves
        fewer than MIN.
    """
    lo, hi = bounds
    now = list(active)
    size = len(now)
    mwms = strategy == MWMS
    if lost is not None:
        if lost not in now:
            return SizeChange(size, refusal=f"worker {lost} is not training (active: {now})")
        if size - 1 < lo:
            return SizeChange(size, refusal=f"worker {lost}'s slot is lost and {size - 1} worker(s) remain, "
                              f"fewer than MIN {lo}")
        return SizeChange(size - 1, going=(lost,), cause=SLOT_LOST, restart_group=mwms,
                          park=() if mwms else (lost,))
    if target is None or not lo <= target <= hi:
        return SizeChange(size, refusal=f"workers={target}: outside the job's elastic range {lo}..{hi}")
    if target == size:
        return SizeChange(size, refusal=f"workers={target}: the job runs at {size} already")
    if target < size:
        going = tuple(now[target:]) if mwms else tuple(sorted(now, reverse=True)[:size - target])
        return SizeChange(target, going=tuple(sorted(going)), cause=cause, restart_group=mwms,
                          park=() if mwms else tuple(sorted(going)))
    back = sorted(s for s in parked if s not in now)[:target - size]
    top = max([*now, *parked], default=-1)
    new = list(range(top + 1, top + 1 + target - size - len(back)))
    coming = tuple(sorted(back + new))
    cluster = top + 1 if started is None else started
    if not mwms and any(slot >= cluster for slot in coming) and planned is not None \
            and all(slot < planned and slot not in moved for slot in coming):  # PSS: slots held in this life
        return SizeChange(target, coming=coming, cause=cause, restart_coordinator=True)
    if mwms or any(slot >= cluster or slot in moved for slot in coming):  # PSS: an address its TF_CONFIG lacks
        return SizeChange(target, coming=coming, cause=cause, restart_group=True)
    return SizeChange(target, coming=coming, cause=cause, unpark=tuple(back))


def slot_lost(planned_kinds: Sequence[str], stop_requested: bool) -> bool:
    """Whether an attempt's end was its slot withdrawn: a ``lose`` fault was planned for that
    attempt and the orchestrator did not stop it itself (``stop_requested``)."""
    return "lose" in planned_kinds and not stop_requested


def node_lost(strategy: str, bounds: tuple[int, int] | None, active: Sequence[int], task_type: str, index: int,
              node: str | None, stop_requested: bool) -> SizeChange | None:
    """The size change a worker's lost node makes (issue 34: a Slurm node gone), asked after a failure
    of a worker: under MWMS of the failed attempt's node and of the live workers' (a partition may
    fail a peer before the lost worker's heartbeats are missed); under PSS of the failed worker's.

    The checks, in order: the job's workers are elastic (``bounds`` set), the attempt is a worker's
    (``task_type`` ``worker``; a chief, ps or evaluator is not elastic: it moves to a node left, as
    for a fixed count), the orchestrator did not stop it itself (``stop_requested``: a group restart,
    a stop), and the backend names its node as lost (``node``).

    Args:
        strategy: ``multi_worker_mirrored`` or ``parameter_server``.
        bounds: (MIN, MAX) of the job's workers; None for a fixed count.
        active: the worker slots training now (indexes, ascending; PSS: the parked ones left out).
        task_type: the attempt's task type.
        index: its task index.
        node: the lost node it runs (or ran) on, the backend's answer; None: its node is not lost.
        stop_requested: the orchestrator stopped the attempt itself.

    Returns:
        None when a check fails: not a lost node's elastic worker, the failure decision takes it as
        before (on Slurm the task moves to a node left: MWMS restarts the group at its size, PSS
        restarts the task). Else a :class:`SizeChange` of cause :data:`NODE_LOST` by
        :func:`size_change`'s rule for a lost slot: MWMS: the group restarts one smaller from the
        last checkpoint without that slot; PSS: that worker is parked (``park``), the others train
        on; or ``refusal`` set (size unchanged) when fewer than MIN workers would remain (or, PSS, the
        worker is parked already): then too as before.
    """
    if bounds is None or strategy not in (MWMS, PSS) or task_type != "worker" or stop_requested or node is None:
        return None
    change = size_change(strategy, active, bounds, lost=index)
    return change if change.refusal else replace(change, cause=NODE_LOST)


def grow_back_at(losses: Sequence[float], cooldown_s: float, window_s: float) -> float | None:
    """When a withdrawn slot may be taken back by itself (orchestrator monotonic seconds).

    Args:
        losses: when the slot was lost, each time, ascending (the last: the loss now).
        cooldown_s: the wait after a single loss.
        window_s: losses older than this before the last one are forgiven.

    Returns:
        The last loss + ``cooldown_s`` x 2^(losses in the window - 1) (a slot lost 3 times
        within the window waits 4 cooldowns); None without a loss.
    """
    if not losses:
        return None
    last = losses[-1]
    recent = sum(1 for t in losses if last - t <= window_s)
    return last + cooldown_s * float(2 ** (recent - 1))


def grow_back_to(size: int, bounds: tuple[int, int], valid: Sequence[int], room: int | None, *,
                 cooldown_s: float | None, since_change_s: float, withdrawn: int = 0,
                 losses_ago_s: Sequence[float] = (), window_s: float = 600.0) -> int | None:
    """The size a job running below MAX grows back to by itself now (None: not now).

    Checked in this order, each a reason not to grow:

    1. ``cooldown_s`` is None (``--grow-back off``), or the job runs at MAX already;
    2. a slot lost and not given back (``withdrawn``): the backend has not said it is back (the local
       and docker backends never do; ``resize`` gives it back);
    3. the cooldown has not passed since the last size change (``since_change_s``), nor, after
       slots lost in the last ``window_s``, :func:`grow_back_at`'s doubled wait since the last loss,
       so a flapping node does not restart the group over and over;
    4. no room (``room``: the largest size the machine could give the job now, None: not known), or
       no size the batch policy accepts (``valid``) between the size now and the room.

    Args:
        size: the workers it runs at now.
        bounds: (MIN, MAX).
        valid: the sizes its batch policy accepts (:func:`orchestrator.spec.elastic.valid_sizes`).
        room: the most workers the machine has room for now (its own lease counted as free).
        cooldown_s: seconds after a size change before it may grow by itself; None: never.
        since_change_s: seconds since its last size change (its life began: MWMS changes size
            by a new life; a job started below MAX counts from its start).
        withdrawn: slots lost and not given back since.
        losses_ago_s: how long ago each slot loss of the run was (seconds, any order).
        window_s: losses longer ago than this before the last one are forgiven.

    Returns:
        The largest accepted size above ``size``, at most MAX and the room; None when it should
        not grow now.
    """
    lo, hi = bounds
    if cooldown_s is None or size >= hi or withdrawn > 0:
        return None
    if since_change_s < cooldown_s:
        return None
    if losses_ago_s:
        due = grow_back_at(sorted(-a for a in losses_ago_s), cooldown_s, window_s)
        if due is not None and due > 0.0:
            return None
    if room is None:
        return None
    bigger = [n for n in valid if size < n <= min(hi, room) and n >= lo]
    return max(bigger) if bigger else None
