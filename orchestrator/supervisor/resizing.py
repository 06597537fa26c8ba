"""Size changes of a running elastic job (issue 34, docs/elastic.md): a resize asked, a slot or node lost.

A request (``python -m orchestrator resize RUN --workers N``, the ``ResizeJob`` call) lands here
from the health server's thread (:meth:`Resizing.request`: checked against the job's bounds by
:func:`~orchestrator.supervisor.rules.resize.size_change`, then left for the loop); a worker whose
slot is withdrawn (an injected ``lose``: :func:`~orchestrator.supervisor.rules.resize.slot_lost`)
is found among the task table's ended attempts; so is a worker whose node may be lost (any
other failed worker attempt of an elastic MWMS job, and the live workers beside it, since a
partition may fail a peer first: :meth:`Resizing.step` returns
:class:`~orchestrator.supervisor.actions.NodeLost`, the loop asks the backend, and
:meth:`Resizing.node_lost` decides by :func:`~orchestrator.supervisor.rules.resize.node_lost`); a job below MAX whose
machine has room again grows back by itself after a cooldown (``--grow-back``: the watch
:class:`~orchestrator.supervisor.growback.GrowBack`, MWMS only). Each tick the loop asks
:meth:`Resizing.step` what to do, before its failure decisions (a lost slot or node is not
restarted in place):

* MultiWorkerMirroredStrategy fixes a group's size when the strategy is built, so a size change
  ends this life of the run and the next one starts at the new size, with a new ``TF_CONFIG``
  (:func:`orchestrator.api.run` continues the run in the same process, as ``launch --resume RUN
  --workers N`` would): a planned resize first takes the coordinated save of a preemption
  (every worker saves at one step and leaves: 0 steps lost); a lost slot stops the group at once
  and the next life starts one smaller from the last checkpoint when at least MIN workers remain,
  else the job fails; a lost node (Slurm) does the same when at least MIN remain, else the failure
  decision takes it as for a fixed count (the task moves to a node left).
* ParameterServerStrategy parks and unparks specific workers (:class:`SizeChange`'s ``park`` /
  ``unpark``) and the others keep running (TF's ``ClusterCoordinator`` trains on without a worker
  and re-adds one restarted at the same address): a shrink parks the highest workers, a grow takes
  parked ones back (:class:`~orchestrator.supervisor.actions.Resize`, carried out by
  :meth:`~orchestrator.supervisor.failures.Restarts.resized`); a lost slot is parked by the failure
  decision (:mod:`~orchestrator.supervisor.rules.parking`), and so is a worker whose node is lost
  (Slurm: :meth:`Resizing.node_lost` says so, :meth:`Resizing.lost_node` tells the failure decision).
  Growing past the cluster the job started
  with needs the coordinator restarted with a new ``TF_CONFIG`` (TF's coordinator only reconnects to
  the addresses of its first cluster): the coordinator gets the preemption notice (its coordinated
  save: the custom loop saves at its next step). A job started below MAX plans every slot up to MAX
  and holds the ones above its start (:attr:`~orchestrator.plan.Plan.held`): a grow into them starts
  them and restarts the coordinator alone once it has saved, with a ``TF_CONFIG`` naming them
  (:attr:`Resizing.cluster`); the ps and the other workers keep running (TF 2.21 lets them serve the
  new coordinator, docs/elastic.md). Past the planned slots the run continues in a next life at the
  new size, as an MWMS resize does, every task restarted.

The part decides; the loop carries out what it returns (:mod:`~orchestrator.supervisor.actions`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

from orchestrator.plan import Plan
from orchestrator.proto.phases import phase_name
from orchestrator.resources.extension import ASKED_GROW_WAIT_S, PACKED, WAIT_FOR_NODES, asked_grow
from orchestrator.supervisor.actions import Action, End, Event, NodeLost, Notice, Preempt, Resize, Stop
from orchestrator.supervisor.growback import GrowBack
from orchestrator.supervisor.records.lives import Carried, LifeBook
from orchestrator.supervisor.records.states import (
    EXIT_FAILED,
    EXIT_PREEMPTED,
    JobState,
    TaskRuntime,
    TaskState,
    describe_exit,
)
from orchestrator.supervisor.rules.hang_rules import POST_TRAINING_PHASES
from orchestrator.supervisor.rules.rehearsal import planned_faults
from orchestrator.supervisor.rules.resize import (
    GREW_BACK,
    MWMS,
    NODE_LOST,
    RESIZE_ASKED,
    SLOT_LOST,
    SizeChange,
    node_lost,
    size_change,
    slot_lost,
)


class Resizing:
    """The size changes of one life of an elastic job.

    Args:
        plan: the job's plan (its spec's ``elastic`` bounds; its ``lose`` faults).
        carried: the run's earlier lives (a grow after a lost slot is ``grew back``).
        lives: this life's record (PSS: the workers parked now); None: none parked.
        room: the most workers the machine has room for now (:class:`GrowBack`); None: no grow back.
        started_wall: Unix seconds this life started.
        grace_s: seconds a PSS coordinator has to save and leave on its notice before a grow into held
            slots kills it (the preemption grace); it then resumes from its last checkpoint.
        asked_room: what a grow asked by ``resize`` into a next life waits for (``for_size(workers)``: the
            most workers the nodes the job may use hold, extension allocations asked for the nodes short;
            ``news()``; ``why(workers)``; optional ``asked_wait_s``: Slurm's
            :class:`~orchestrator.backends.slurm_room.SlurmRoom`); None: the grow goes at once.
    """

    def __init__(self, plan: Plan, carried: Carried, lives: LifeBook | None = None,
                 room: Callable[[], int | None] | None = None, started_wall: float = 0.0,
                 grace_s: float = 30.0, *, asked_room: Any = None) -> None:
        spec = plan.spec
        self.strategy = spec.strategy.value
        self.bounds = (spec.elastic.min, spec.elastic.max) if spec.elastic is not None else None
        self.size = spec.workers
        self._coordinator = spec.coordinator
        self.lost_before = any(life.cause in (SLOT_LOST, NODE_LOST) for life in carried.lives)
        self._lives = lives
        self._lose = {(f.task.name, f.attempt): int(f.at) if f.trigger == "step" else None
                      for f in planned_faults(plan) if f.kind == "lose"}
        self._reached: int | None = None  # the step a lost slot's fault fired at: the group trained that far
        self._asked_node: set[tuple[str, int]] = set()  # failed worker attempts whose node the backend was asked of
        self._node_lost: dict[tuple[str, int], str] = {}  # PSS: failed worker attempts to park, their lost node
        self._asked: SizeChange | None = None  # set by the server thread, taken by the loop
        self._reason = ""
        self._what = ""  # the reason of the preemption a resize asked for (its coordinated save)
        self._outside = False  # a preemption from outside was asked: the run ends Preempted, no next life
        self._training_ended = False  # the coordinator reported a phase after training (seen by the loop)
        self.next: SizeChange | None = None
        """The size the run continues at in its next life (None: it does not continue)."""
        self.cluster: int | None = plan.started_workers
        """PSS below MAX: the workers the ``TF_CONFIG`` of a task started now names (the coordinator's cluster;
        it grows when the coordinator restarts for a grow); None: the plan's cluster."""
        self._planned = spec.workers if plan.started_workers is not None else None  # slots held up to MAX
        self._growing: SizeChange | None = None  # PSS: the coordinator was told to save for this grow
        self._grace_s, self._killing = grace_s, False  # a coordinator not left within it is killed
        self._noticed_at: float | None = None  # when the coordinator got the notice of the grow under way
        self.grow = GrowBack(plan, carried, room, started_wall)
        self._asked_room = asked_room
        self._waiting: tuple[SizeChange, str, float] | None = None  # a grow asked, waiting for nodes (since when)
        self._said_waiting = False

    def request(self, workers: int, reason: str, state: JobState) -> tuple[bool, str]:
        """A resize asked (the ``ResizeJob`` call; safe from another thread: one assignment).
        Returns (accepted, why refused)."""
        if self.bounds is None:
            return False, f"the job's workers are a fixed count ({self.size}), not elastic"
        if state.terminal or state is JobState.PENDING:
            return False, f"the job is {state.value}, not running"
        if self.next is not None or self._asked is not None or self._growing is not None:
            return False, "a size change is already under way"
        if self._training_ended:  # evaluation, export: a new group would train nothing
            return False, "training has ended (evaluation, export): nothing left to train at another size"
        if self.strategy != MWMS:
            return self._pss_request(workers, reason)
        cause = GREW_BACK if workers > self.size and self.lost_before else RESIZE_ASKED
        change = size_change(self.strategy, range(self.size), self.bounds, target=workers, cause=cause)
        if change.refusal:
            return False, change.refusal
        if not change.restart_group:
            return False, f"{self.strategy}: a resize of a running job is not built yet (docs/elastic.md)"
        self._reason = reason
        self._asked = change
        return True, ""

    def _pss_request(self, workers: int, reason: str) -> tuple[bool, str]:
        """A PSS resize: park the highest workers, or take parked ones back (their addresses are the
        cluster's); a grow past the cluster this life started with (a slot its ``TF_CONFIG`` lacks), or
        that takes back a worker parked for its lost node (a new address), restarts the coordinator with a
        new ``TF_CONFIG``: the run continues in a next life at the new size."""
        assert self.bounds is not None
        parked = _slots(self._lives.life.parked if self._lives else ())
        moved = _slots(name for name, _ in self._node_lost)  # parked for their lost node
        change = size_change(self.strategy, _slots(self._active_now()), self.bounds, target=workers, parked=parked,
                             started=self.size if self.cluster is None else self.cluster, planned=self._planned,
                             moved=moved)
        if change.refusal:
            return False, change.refusal
        self._reason = reason
        back = any(slot in parked for slot in change.coming)
        self._asked = replace(change, cause=GREW_BACK if back else RESIZE_ASKED)
        return True, ""

    def step(self, tasks: Sequence[TaskRuntime], state: JobState, now: float | None = None) -> list[Action]:
        """What to do now: a resize asked (MWMS: the coordinated save, then this life ends), a
        slot lost (MWMS: stop the group, continue one smaller; fail below MIN), a failed worker of an
        elastic MWMS job: the backend is to be asked of its node and of the live workers' nodes
        (:class:`NodeLost`, once per failed attempt), room again below MAX after the cooldown
        (``now``: the loop's clock; MWMS: the coordinated save of a grow back); [] otherwise. A grow
        asked into a next life on a backend that says its room (Slurm) first waits for the nodes it
        needs (:meth:`_wait_for_nodes`), the job training on meanwhile."""
        if state.terminal or self.next is not None or self._outside:
            return []
        self._training_ended = self._training_ended or self._trained(tasks)
        if self._growing is not None:
            return self._grown(tasks, now)
        asked, self._asked = self._asked, None
        if asked is not None:
            self._waiting = None  # a request replaces a grow still waiting for nodes
        elif self._waiting is not None and self._training_ended:
            asked, self._waiting = self._waiting[0], None
        if asked is not None and self._training_ended:  # evaluation, export: a new group would train nothing
            return [Event(f"{asked.cause} to {asked.workers} worker(s) not done: training has ended")]
        if asked is not None and asked.restart_coordinator:  # PSS into held slots: the coordinator saves first
            self._growing, self._noticed_at, self._killing = asked, now, False
            coming = ", ".join(f"worker-{i}" for i in asked.coming)
            return [Event(f"{asked.cause}: {len(self._active_now())} -> {asked.workers} worker(s) ({self._reason}); "
                          f"past the {self.cluster} worker(s) its coordinator's TF_CONFIG names: the coordinator "
                          f"saves at its next step, then restarts with a TF_CONFIG naming {coming} too; the ps and "
                          "the other workers keep running"), Notice((self._coordinator.name,), planned=True)]
        news: list[Action] = []
        if asked is not None and asked.restart_group and asked.coming and self._asked_room is not None:
            self._waiting = (asked, self._reason, now if now is not None else 0.0)  # into a next life: nodes first
            asked = None
        if self._waiting is not None:  # the job trains on meanwhile: a slot or node lost is still looked for
            news, asked = self._wait_for_nodes(now)
        if asked is not None and self.strategy != MWMS and not asked.restart_group:  # PSS: this life goes on
            return [Event(f"{asked.cause}: {len(self._active_now())} -> {asked.workers} worker(s) ({self._reason})"),
                    Resize(asked.workers, asked.cause, tuple(f"worker-{i}" for i in asked.park),
                           tuple(f"worker-{i}" for i in asked.unpark))]
        if asked is not None:
            self.next = asked
            what = self._what = f"{asked.cause}: {len(self._active_now())} -> {asked.workers} worker(s)"
            if self.strategy != MWMS:  # PSS past the started cluster: a new coordinator, a new TF_CONFIG
                return [*news, Event(f"{what} ({self._reason}); past the {self.size} worker(s) the cluster started "
                                     f"with: the coordinator saves at its next step, then the run continues at "
                                     f"{asked.workers} with a new TF_CONFIG"), Preempt(what)]
            return [*news, Event(f"{what} ({self._reason}); every worker saves at its next step, then the group "
                                 f"continues at {asked.workers}"), Preempt(what)]
        for rt in tasks:
            a = rt.current
            if (a.state is TaskState.FAILED and (rt.task.name, a.number) in self._lose
                    and slot_lost(["lose"], a.stop_requested)):
                self._reached = self._lose.pop((rt.task.name, a.number))
                return [*news, *self._lost(rt)]
        if asking := self._ask_nodes(tasks):
            return [*news, *asking]
        if self._waiting is not None:  # a grow asked waits for nodes: the grow-back watch does not look meanwhile
            return news
        return self._grow_back(tasks, state, now) if now is not None and self.strategy == MWMS else []

    def _grown(self, tasks: Sequence[TaskRuntime], now: float | None) -> list[Action]:
        """PSS, a grow into held slots under way: once the coordinator has ended (saved on its notice), its
        cluster is the new size and the coming workers and its next attempt start (:class:`Resize`); [] before,
        and a kill (:class:`Stop`, at once) once it has not left within the grace."""
        rt = next(rt for rt in tasks if rt.task == self._coordinator)
        if self._growing is None:
            return []
        if not rt.current.state.terminal:
            if self._killing or now is None or self._noticed_at is None or now - self._noticed_at < self._grace_s:
                return []
            self._killing = True
            return [Event(f"{rt.task.name} did not leave within {self._grace_s:g} s of its notice: killed; it resumes "
                          "from its last checkpoint"), Stop((rt.task.name,), "killed: no save on its notice", 0.0)]
        change, self._growing = self._growing, None
        self.cluster = max(max(change.coming) + 1, self.cluster or 0)
        code = rt.current.exit_code
        return [Event(f"{rt.task.name} ended on its notice ({describe_exit(code) if code is not None else 'gone'}): "
                      f"its cluster grows to "
                      f"{self.cluster} worker(s)"),
                Resize(change.workers, change.cause, unpark=tuple(f"worker-{i}" for i in change.coming),
                       coordinator=rt.task.name)]

    def _wait_for_nodes(self, now: float | None) -> tuple[list[Action], SizeChange | None]:
        """A grow asked by ``resize`` into a next life, on a backend that says its room (Slurm): the
        change to carry out now, or None while it waits for extension allocations
        (:func:`~orchestrator.resources.extension.asked_grow`); the room's news as events."""
        assert self._waiting is not None
        change, reason, since = self._waiting
        room = self._asked_room
        holds = room.for_size(change.workers)
        news: list[Action] = [Event(text) for text in room.news()]
        bound_s = float(getattr(room, "asked_wait_s", ASKED_GROW_WAIT_S))
        verdict = asked_grow(change.workers, holds, 0.0 if now is None else now - since, bound_s)
        what = f"{change.cause}: {len(self._active_now())} -> {change.workers} worker(s)"
        if verdict == WAIT_FOR_NODES:
            if not self._said_waiting:
                self._said_waiting = True
                news.append(Event(f"{what} ({reason}): the nodes the job may use hold {holds} worker(s); waiting up "
                                  f"to {bound_s:g} s for extension allocation(s) of the nodes short, asked all at "
                                  "once"))
            return news, None
        self._waiting, self._said_waiting = None, False
        self._reason = reason
        if verdict == PACKED:
            news.append(Event(f"{what}: no extension allocation granted within {bound_s:g} s: it goes on the nodes "
                              f"the job has ({holds} worker(s) at its density), more tasks a node"))
        elif holds >= change.workers and hasattr(room, "why"):
            self._reason = f"{reason}; {room.why(change.workers)}"
        return news, change

    def _grow_back(self, tasks: Sequence[TaskRuntime], state: JobState, now: float) -> list[Action]:
        """MWMS below MAX, room again after the cooldown: the planned resize of a request, cause ``grew back``."""
        target = self.grow.look(now, self.size, state is JobState.RUNNING)
        news: list[Action] = [Event(text) for text in self.grow.news()]  # e.g. Slurm's extension allocations
        if target is None or self.bounds is None or self._trained(tasks):
            return news
        change = size_change(self.strategy, range(self.size), self.bounds, target=target, cause=GREW_BACK)
        if change.refusal or not change.restart_group:
            return news
        self.next = change
        what = self._what = f"{GREW_BACK}: {self.size} -> {target} worker(s)"
        return [*news, Event(f"{what} ({self.grow.why(target)}, {self.grow.cooldown_s:g} s or more after the last "
                             f"size change); every worker saves at its next step, then the group continues at "
                             f"{target}"), Preempt(what)]

    def _ask_nodes(self, tasks: Sequence[TaskRuntime]) -> list[Action]:
        """Elastic MWMS and PSS: :class:`NodeLost` of each worker attempt failed since the last look (not
        stopped by the orchestrator), and under MWMS of the live workers too; [] when none failed."""
        if self.bounds is None:
            return []
        workers = [rt for rt in tasks if rt.task.task_type == "worker"]
        failed = [(rt.task.name, rt.current.number) for rt in workers
                  if rt.current.state is TaskState.FAILED and not rt.current.stop_requested]
        ask = [key for key in failed if key not in self._asked_node]
        if not ask:
            return []
        self._asked_node.update(ask)
        # MWMS: a lost node may fail a peer first (its collective breaks on the partition before the lost
        # worker's heartbeats are missed): ask of the live workers' nodes too. PSS workers share nothing.
        live = [rt.task.name for rt in workers if rt.live] if self.strategy == MWMS else []
        return [NodeLost(name) for name in [name for name, _ in ask] + live]

    def node_lost(self, rt: TaskRuntime, node: str | None) -> list[Action]:
        """The backend's answer about the node of ``rt``'s attempt (failed, or live beside a failed
        peer; ``node``: the lost node it runs on; None: not lost), decided by :func:`node_lost`: under
        MWMS with at least MIN workers left, stop the group and continue one smaller from the last
        checkpoint; under PSS with at least MIN left, the failure decision parks the worker
        (:meth:`lost_node` says it is the node's; no restart is tried); otherwise [] (the failure
        decision takes it as for a fixed count), with an event when the node is lost below MIN. Once
        a change is decided, [] for every other answer."""
        if self.next is not None or self.bounds is None:
            return []
        mwms = self.strategy == MWMS
        active = range(self.size) if mwms else _slots(self._active_now())
        change = node_lost(self.strategy, self.bounds, active, rt.task.task_type, rt.task.task_index, node,
                           rt.current.stop_requested)
        if change is None:
            return []
        if change.refusal:
            return [Event(f"{rt.task.name}'s node {node} is lost; not {'shrinking' if mwms else 'parking'}: "
                          f"{change.refusal}")]
        assert node is not None
        if not mwms:  # the failure decision parks it this tick (Restarts asks lost_node)
            self._node_lost[(rt.task.name, rt.current.number)] = node
            return [Event(f"{rt.task.name}'s node {node} is lost: it is parked, not restarted; training goes on with "
                          f"{change.workers} worker(s)")]
        self.next = change
        why = (f"{rt.task.name}'s node {node} is lost: the group continues at {change.workers} worker(s) from the "
               "last checkpoint")
        return [Event(why), End(JobState.PREEMPTED, EXIT_PREEMPTED, why), Stop(None, f"stopped: {NODE_LOST}")]

    def lost_node(self, task: str, attempt: int) -> str | None:
        """PSS: the lost node of the failed attempt ``attempt`` of worker ``task`` when it is to be parked
        for it (:meth:`node_lost` decided so); None otherwise."""
        return self._node_lost.get((task, attempt))

    def _trained(self, tasks: Sequence[TaskRuntime]) -> bool:
        """The coordinator reported the end of training (a phase after it)."""
        hb = next((rt.current.heartbeat for rt in tasks if rt.task == self._coordinator), None)
        return hb is not None and phase_name(hb.heartbeat.phase) in POST_TRAINING_PHASES

    def _lost(self, rt: TaskRuntime) -> list[Action]:
        assert self.bounds is not None
        if self.strategy != MWMS:
            return []  # PSS: the failure decision parks it, or fails the job below MIN (rules/parking.py)
        change = size_change(self.strategy, range(self.size), self.bounds, lost=rt.task.task_index)
        if change.refusal:
            return [End(JobState.FAILED, EXIT_FAILED, change.refusal), Stop(None, "stopped: a slot lost below MIN")]
        self.next = change
        why = (f"{rt.task.name}'s slot is lost: the group continues at {change.workers} worker(s) from the last "
               "checkpoint")
        return [Event(why), End(JobState.PREEMPTED, EXIT_PREEMPTED, why), Stop(None, f"stopped: {SLOT_LOST}")]

    def _active_now(self) -> list[str]:
        idle = self._lives.life.idle if self._lives is not None else []
        return [f"worker-{i}" for i in range(self.size) if f"worker-{i}" not in idle]

    def preempted(self, reason: str) -> None:
        """A preemption was asked (safe from a signal handler): from outside (a SIGTERM, a time
        limit: not this part's own coordinated save), the run ends Preempted and no next life follows."""
        if reason != self._what:
            self._outside = True

    def continues(self, state: JobState) -> bool:
        """The run continues in a next life at another size (this one ended for a size change, and
        no preemption from outside came meanwhile): the backend stays open for it (its warm spares
        become the new group's tasks)."""
        return self.next is not None and state is JobState.PREEMPTED and not self._outside

    def ended_by(self, state: JobState) -> tuple[str | None, int | None]:
        """The cause this life ended with when a size change ended it (its ``lives`` entry's
        ``cause``, the next segment's), None otherwise; and the step the group is known to have
        reached (a ``lose`` fault's ``step=N``: heartbeats may not have said it before the
        loss, also when the loss failed the job below MIN), None when not known."""
        if self.next is None or not self.continues(state):
            return None, self._reached
        return self.next.cause, self._reached


def _slots(names: Iterable[str]) -> list[int]:
    """The worker slots (task indexes) of worker task names (``worker-2`` -> 2), in order."""
    return [int(name.rsplit("-", 1)[1]) for name in names]
