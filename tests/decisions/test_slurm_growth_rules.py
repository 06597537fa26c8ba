"""Growing an elastic MWMS job on Slurm back (issue 34 item 5: "growth comes from a one-node extension
allocation (a new Slurm job whose step joins the run)"), as tables over the pure rules of
:mod:`orchestrator.resources.extension` and :mod:`orchestrator.backends.slurm_extend`, then the loop tick
by tick with a room that counts lost nodes itself (as :class:`~orchestrator.backends.slurm_room.SlurmRoom`
does) and says what happened. The commands themselves run on the simulated cluster
(tests/slurm/test_slurm_elastic.py, tests/slurm/test_slurm_extend.py).
"""

from __future__ import annotations

import pytest

from orchestrator.backends.slurm_extend import BaseJob, extension_argv, step_environ, watch_script
from orchestrator.resources.extension import (
    CANCEL_LATE,
    CANCEL_UNNEEDED,
    GONE,
    GRANTED,
    NOTHING,
    NOW,
    PACKED,
    SUBMIT,
    WAIT,
    WAIT_FOR_NODES,
    asked_grow,
    extension_next,
    extensions_to_ask,
    nodes_room,
    nodes_short,
    per_node,
)
from orchestrator.supervisor.records.lives import Carried, Life
from tests.decisions.test_resize_loop import Growing


def _workers(n: int) -> int:
    return n


def _with_chief_and_ps(n: int) -> int:
    return n + 2


@pytest.mark.parametrize("lo, hi, tasks_at, nodes, per, room", [
    (1, 2, _workers, 1, 1, 1),  # one node left of two: 1 worker
    (1, 2, _workers, 2, 1, 2),  # the extension's node: MAX
    (1, 2, _workers, 5, 1, 2),  # never past MAX
    (2, 4, _workers, 1, 1, None),  # not even MIN
    (1, 4, _workers, 1, 2, 2),  # two tasks a node
    (1, 4, _with_chief_and_ps, 2, 2, 2),  # the chief and ps take their places first
    (1, 4, _with_chief_and_ps, 1, 1, None),
])
def test_nodes_room(lo, hi, tasks_at, nodes, per, room):
    assert nodes_room(lo, hi, tasks_at, nodes, per) == room


@pytest.mark.parametrize("hi, tasks_at, nodes, per, short", [
    (2, _workers, 1, 1, 1), (2, _workers, 2, 1, 0), (2, _workers, 3, 1, 0), (4, _workers, 1, 2, 1),
    (4, _with_chief_and_ps, 2, 2, 1), (3, _workers, 0, 1, 3),
])
def test_nodes_short(hi, tasks_at, nodes, per, short):
    assert nodes_short(hi, tasks_at, nodes, per) == short


@pytest.mark.parametrize("option, tasks, nodes, density", [
    (None, 2, 2, 1), (None, 3, 2, 2), (None, 4, 2, 2), (2, 2, 2, 2), (None, 1, 3, 1), (None, 2, 0, 2),
])
def test_per_node(option, tasks, nodes, density):
    assert per_node(option, tasks, nodes) == density


@pytest.mark.parametrize("short, pending, age, retry_in, action", [
    # none pending: ask when a node is short and no retry wait is left
    (1, None, 0.0, 0.0, SUBMIT),
    (1, None, 0.0, -5.0, SUBMIT),
    (1, None, 0.0, 30.0, NOTHING),  # a cancelled or failed one: ask again later
    (0, None, 0.0, 0.0, NOTHING),  # enough nodes, or the grow no longer due
    # one pending: at most one at a time
    (1, "PENDING", 10.0, 0.0, WAIT),
    (1, "CONFIGURING", 10.0, 0.0, WAIT),
    (1, "RUNNING", 10.0, 0.0, GRANTED),
    (0, "RUNNING", 10.0, 0.0, GRANTED),  # started meanwhile: room for the next look
    (1, "PENDING", 121.0, 0.0, CANCEL_LATE),  # not started within the bound
    (0, "PENDING", 10.0, 0.0, CANCEL_UNNEEDED),
    (1, "", 10.0, 0.0, GONE),  # Slurm lists it no more
    (1, "FAILED", 10.0, 0.0, GONE),
    (1, "CANCELLED", 10.0, 0.0, GONE),
])
def test_extension_next(short, pending, age, retry_in, action):
    assert extension_next(short, pending, age, retry_in, grant_timeout_s=120.0) == action


@pytest.mark.parametrize("short, pending, retry_in, ask", [
    (1, 0, 0.0, 1),
    (2, 0, 0.0, 2),  # a grow short of two nodes asks for both at once, not one after the other
    (2, 1, 0.0, 1),  # one pending (or granted meanwhile): the other
    (2, 2, 0.0, 0),
    (1, 2, 0.0, 0),  # more pending than short: none more (the surplus is cancelled: extension_next)
    (0, 0, 0.0, 0),  # enough nodes, or the grow no longer due
    (2, 0, 30.0, 0),  # a cancelled or failed one: ask again later
])
def test_extensions_to_ask(short, pending, retry_in, ask):
    assert extensions_to_ask(short, pending, retry_in) == ask


@pytest.mark.parametrize("rank_short, state, action", [
    # each pending extension is asked of extension_next with the nodes short less those pending before it
    (1, "PENDING", WAIT),
    (0, "PENDING", CANCEL_UNNEEDED),  # the second of two pending when one node is short
    (0, "RUNNING", GRANTED),  # a surplus one that started: room all the same
])
def test_each_pending_extension_is_needed_while_fewer_before_it_are_pending_than_nodes_short(rank_short, state,
                                                                                               action):
    assert extension_next(rank_short, state, 10.0, 0.0, grant_timeout_s=120.0) == action


@pytest.mark.parametrize("target, room, waited, grow", [
    (2, None, 0.0, NOW),  # the backend does not say (local, docker): it places what it is asked
    (2, 2, 0.0, NOW),  # its nodes hold the size asked
    (3, 3, 50.0, NOW),
    (2, 1, 0.0, WAIT_FOR_NODES),  # a node short: extension allocations asked, the grow waits for them
    (3, 1, 119.0, WAIT_FOR_NODES),
    (3, 2, 120.0, PACKED),  # none granted in time: on the nodes it has, more tasks a node (as before)
])
def test_asked_grow(target, room, waited, grow):
    assert asked_grow(target, room, waited, 120.0) == grow


@pytest.mark.parametrize("base, exclude, flags", [
    # the run's partition, time left, account, QoS, CPUs and GPUs per node; none of its nodes
    (BaseJob("41", partition="gpu", time_left="1:58:00", account="ml", qos="high", cpus_per_node=8, gres="gpu:2"),
     ["osl1", "osl0", "osl1"],
     ["--exclude=osl0,osl1", "--partition=gpu", "--time=1:58:00", "--account=ml", "--qos=high", "--gres=gpu:2",
      "--cpus-per-task=8"]),
    # what the run's job does not say is left to Slurm's defaults (an unlimited run: the partition's default)
    (BaseJob("41"), ["osl0"], ["--exclude=osl0"]),
])
def test_extension_argv(base, exclude, flags):
    argv = extension_argv(base, "r1", exclude)
    assert argv[:7] == ["sbatch", "--parsable", "--nodes=1", "--ntasks=1", "--job-name=r1:extend",
                        "--output=/dev/null", "--error=/dev/null"]
    assert argv[7:-1] == flags
    assert argv[-1] == f"--wrap={watch_script('41')}"


def test_the_extension_waits_while_the_runs_job_is_in_squeue_and_takes_no_input_of_the_allocation():
    script = watch_script("41")
    assert "squeue -h -j 41" in script and "exec sleep infinity" in script  # no squeue on the node: its time limit
    env = step_environ({"SLURM_JOB_ID": "41", "SLURM_JOB_NODELIST": "osl[0-1]", "SLURM_CONF": "/x", "PATH": "/bin"})
    assert env == {"SLURM_CONF": "/x", "PATH": "/bin"}


class NodesRoom:
    """A room as :class:`~orchestrator.backends.slurm_room.SlurmRoom` answers: it counts lost nodes
    itself (a lost node is not room until it is back), says what happened, and where the room comes from."""

    counts_lost = True

    def __init__(self) -> None:
        self.nodes, self.asked, self.said = 1, 0, []

    def __call__(self) -> int | None:
        self.asked += 1
        return min(2, self.nodes)

    def news(self) -> list[str]:
        said, self.said = self.said, []
        return said

    def why(self, workers: int) -> str:
        return "extension allocation 7 on osl2 granted"


def test_a_job_shrunk_by_a_lost_node_grows_back_once_its_room_has_the_node(tmp_path):
    lost = Life(number=1, started_at=0.0, ended_at=1.0, ended="Preempted", cause="node lost", size={"workers": 2})
    room = NodesRoom()
    h = Growing(tmp_path, 1, 2, start=1, grow_back_s=2.0, carried=Carried(lives=(lost,)), room=room)
    h.all_beat(step=45)
    h.tick()
    h.train_for(2.0, step=45)  # the cooldown passed: the room is asked (the lost slot not held against it)
    assert room.asked >= 1 and h.sup.resizing.next is None  # one node: no grow yet (the extension pending)
    room.said.append("growing back needs another node: asked Slurm for extension allocation 7 (one node, ...)")
    h.train_for(1.0, step=48)
    assert "growing back needs another node: asked Slurm for extension allocation 7 (one node, ...)" in h.view.events
    room.nodes = 2
    room.said.append("extension allocation 7 on osl2 granted (Slurm started it 3.1 s after it was asked)")
    h.train_for(1.0, step=50)
    assert h.sup.resizing.next is not None and (h.sup.resizing.next.workers, h.sup.resizing.next.cause) == \
        (2, "grew back")
    events = h.view.events
    granted = events.index("extension allocation 7 on osl2 granted (Slurm started it 3.1 s after it was asked)")
    assert events[granted + 1].startswith("grew back: 1 -> 2 worker(s) (extension allocation 7 on osl2 granted, 2 s "
                                          "or more after the last size change); every worker saves at its next step")


def test_a_room_that_does_not_count_lost_slots_is_not_asked_after_a_loss(tmp_path):
    lost = Life(number=1, started_at=0.0, ended_at=1.0, ended="Preempted", cause="node lost", size={"workers": 2})
    h = Growing(tmp_path, 1, 2, start=1, grow_back_s=2.0, carried=Carried(lives=(lost,)))  # the lease ledger's
    h.room = 2
    h.all_beat(step=45)
    h.tick()
    h.train_for(30.0, step=45)
    assert h.asked == 0 and h.sup.resizing.next is None


class AskedRoom(NodesRoom):
    """:class:`NodesRoom` as a grow asked by ``resize`` asks it (``for_size``: the nodes short of that size
    are asked for), with a short wait bound."""

    asked_wait_s = 10.0

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    def for_size(self, workers: int) -> int:
        self.sizes.append(workers)
        return min(3, self.nodes)


def _asked_after_a_lost_node(tmp_path, room: AskedRoom):
    lost = Life(number=1, started_at=0.0, ended_at=1.0, ended="Preempted", cause="node lost", size={"workers": 3})
    h = Growing(tmp_path, 1, 3, start=1, grow_back_s=None, carried=Carried(lives=(lost,)), asked_room=room)
    h.all_beat(step=45)
    h.tick()
    assert h.sup.resizing.request(3, "resize asked by a user", h.sup.state) == (True, "")
    h.train_for(1.0, step=46)
    return h


def test_a_grow_asked_short_of_nodes_waits_for_extension_allocations_of_them_all_then_goes(tmp_path):
    room = AskedRoom()
    h = _asked_after_a_lost_node(tmp_path, room)
    assert h.sup.resizing.next is None and set(room.sizes) == {3}  # the nodes short of 3, not of MAX's grow-back
    assert any(e.startswith("grew back: 1 -> 3 worker(s) (resize asked by a user): the nodes the job may use hold 1 "
                            "worker(s); waiting up to 10 s for extension allocation(s)") for e in h.view.events)
    room.said += ["growing back needs another node: asked Slurm for extension allocation 7 (one node, ...)",
                  "extension allocation 7 on osl1 granted", "extension allocation 8 on osl2 granted"]
    room.nodes = 3
    h.train_for(1.0, step=47)
    change = h.sup.resizing.next
    assert change is not None and (change.workers, change.cause) == (3, "grew back")
    events = h.view.events
    assert events.index("extension allocation 8 on osl2 granted") < next(
        i for i, e in enumerate(events) if e.startswith("grew back: 1 -> 3 worker(s) (resize asked by a user; "
                                                        "extension allocation 7 on osl2 granted); every worker saves"))


def test_a_grow_asked_goes_on_the_nodes_it_has_once_no_extension_came_in_time(tmp_path):
    room = AskedRoom()
    h = _asked_after_a_lost_node(tmp_path, room)
    h.train_for(10.0, step=50)
    change = h.sup.resizing.next
    assert change is not None and change.workers == 3
    assert any("grew back: 1 -> 3 worker(s): no extension allocation granted within 10 s: it goes on the nodes the "
               "job has (1 worker(s) at its density)" in e for e in h.view.events), h.view.events


def test_a_request_replaces_a_grow_still_waiting_for_nodes(tmp_path):
    room = AskedRoom()
    h = _asked_after_a_lost_node(tmp_path, room)
    assert h.sup.resizing.request(2, "resize asked by a user", h.sup.state) == (True, "")
    h.train_for(1.0, step=47)
    assert room.sizes[-1] == 2 and h.sup.resizing.next is None  # now the nodes short of 2
    room.nodes = 2
    h.train_for(1.0, step=48)
    assert h.sup.resizing.next is not None and h.sup.resizing.next.workers == 2


def test_without_a_room_that_says_a_grow_asked_goes_at_once(tmp_path):
    lost = Life(number=1, started_at=0.0, ended_at=1.0, ended="Preempted", cause="node lost", size={"workers": 3})
    h = Growing(tmp_path, 1, 3, start=1, grow_back_s=None, carried=Carried(lives=(lost,)))
    h.all_beat(step=45)
    h.tick()
    assert h.sup.resizing.request(3, "resize asked by a user", h.sup.state) == (True, "")
    h.tick()
    assert h.sup.resizing.next is not None and h.sup.resizing.next.workers == 3


def test_a_node_lost_while_a_grow_asked_waits_for_nodes_still_shrinks_the_job(tmp_path):
    from orchestrator.supervisor.records.states import TaskState
    from tests.decisions.test_node_lost import Lost

    room = AskedRoom()
    lost = Life(number=1, started_at=0.0, ended_at=1.0, ended="Preempted", cause="node lost", size={"workers": 3})
    h = Growing(tmp_path, 1, 3, start=2, grow_back_s=None, carried=Carried(lives=(lost,)), asked_room=room)
    h.backend.lost_nodes = Lost({"worker-1": "osl1"})
    h.all_beat(step=45)
    h.tick()
    assert h.sup.resizing.request(3, "resize asked by a user", h.sup.state) == (True, "")
    h.train_for(1.0, step=46)  # waiting for nodes
    assert h.sup.resizing.next is None
    h.exit("worker-1", -9)
    h.tick(0.1)
    change = h.sup.resizing.next
    assert change is not None and (change.workers, change.cause) == (1, "node lost"), h.view.events
    assert h.task("worker-1").state is TaskState.FAILED
