"""Tasks -> cores (orchestrator.resources.cpus.assign_cores, a pure function) and what lands in the plan."""

from __future__ import annotations

import os

import pytest

from orchestrator import env
from orchestrator.plan import make_plan
from orchestrator.resources.cpus import assign_cores, cpu_order, format_cpus, plan_cpus
from orchestrator.resources.pinning import parse_cpus
from orchestrator.spec import JobSpec
from orchestrator.spec.model import Strategy, TaskId

W = [TaskId("worker", i) for i in range(4)]
CHIEF, PS = TaskId("chief", 0), TaskId("ps", 0)


def test_each_training_task_gets_its_own_block_and_threads_from_it():
    plan = assign_cores(range(8), W[:2], [])
    assert plan.tasks == {W[0]: (0, 1, 2, 3), W[1]: (4, 5, 6, 7)}
    assert plan.threads == {W[0]: 4, W[1]: 4} and plan.service == ()
    assert plan.env(W[1]) == {"TF_NUM_INTRAOP_THREADS": "4", "TF_NUM_INTEROP_THREADS": "4", "OMP_NUM_THREADS": "4",
                              env.CPUS: "4-7"}


def test_two_workers_on_two_cores_one_each_and_nothing_kept():
    plan = assign_cores([0, 1], W[:2], [])
    assert plan.tasks == {W[0]: (0,), W[1]: (1,)} and plan.threads == {W[0]: 1, W[1]: 1}
    assert env.SERVICE_CPUS not in plan.env(W[0])
    assert plan.env(W[0])["TF_NUM_INTEROP_THREADS"] == "2"  # inter-op: at least 2


def test_what_the_even_split_leaves_is_kept_for_the_orchestrator_and_spares():
    plan = assign_cores(range(7), W[:3], [])
    assert plan.tasks == {W[0]: (0, 1), W[1]: (2, 3), W[2]: (4, 5)} and plan.service == (6,)
    assert plan.env(W[0])[env.SERVICE_CPUS] == "6"


def test_tasks_that_do_not_train_get_a_core_off_the_training_ones_where_cores_allow():
    # PSS: chief (coordinator) and ps do not train; 4 cores, 2 workers: one core each is free
    plan = assign_cores(range(4), W[:2], [CHIEF, PS])
    assert plan.tasks[W[0]] == (0,) and plan.tasks[W[1]] == (1,)
    assert plan.tasks[CHIEF] == plan.tasks[PS] == (2, 3) == plan.service
    assert plan.threads[CHIEF] == 2 and plan.threads[W[0]] == 1
    # as many cores as workers: the workers keep theirs, the others float (not pinned)
    plan = assign_cores([0, 1], W[:2], [CHIEF, PS])
    assert set(plan.tasks) == {W[0], W[1]} and plan.service == ()
    assert plan.threads[CHIEF] == 1  # cores // tasks, as without pinning


def test_fewer_cores_than_training_tasks_pins_nothing_and_says_why():
    plan = assign_cores([0, 1], W[:3], [])
    assert not plan.pinned and plan.threads == {W[0]: 1, W[1]: 1, W[2]: 1}
    assert "2 core(s) for 3 training tasks" in plan.describe()
    assert env.CPUS not in plan.env(W[0])


def test_no_pin_and_the_specs_threads():
    off = assign_cores(range(8), W[:2], [], pin=False)
    assert not off.pinned and off.reason == "--no-pin" and off.threads == {W[0]: 4, W[1]: 4}
    assert assign_cores(range(8), W[:2], [], threads=3).threads == {W[0]: 3, W[1]: 3}


def test_pinning_stays_within_the_cores_given_in_their_order():
    # a user's taskset -c 2,3,6,7 (in topology order): the tasks get cores of that set only
    plan = assign_cores([2, 6, 3, 7], W[:2], [])
    assert plan.tasks == {W[0]: (2, 6), W[1]: (3, 7)}


@pytest.mark.parametrize("cpus,text", [((0, 1, 2, 3, 8), "0-3,8"), ((5,), "5"), ((), ""), ((1, 3, 4), "1,3-4")])
def test_cpu_lists_round_trip(cpus, text):
    assert format_cpus(cpus) == text
    assert parse_cpus(text) == cpus


def test_a_bad_cpu_list_is_refused():
    with pytest.raises(ValueError):
        parse_cpus("3-1")


def test_cpu_order_keeps_hyperthread_siblings_together(tmp_path):
    # cpu0/cpu2 are core 0, cpu1/cpu3 core 1 (a common numbering): siblings end up adjacent
    for cpu, core in ((0, 0), (1, 1), (2, 0), (3, 1)):
        top = tmp_path / f"cpu{cpu}" / "topology"
        top.mkdir(parents=True)
        (top / "physical_package_id").write_text("0\n")
        (top / "core_id").write_text(f"{core}\n")
    assert cpu_order({0, 1, 2, 3}, tmp_path) == [0, 2, 1, 3]
    assert cpu_order({5, 4}, tmp_path / "missing") == [4, 5]


def test_the_plan_carries_each_tasks_cores_and_threads():
    spec = JobSpec.create(workers=2)
    cpus = plan_cpus(spec, cores=[0, 1, 2, 3])
    addresses = {t: f"127.0.0.1:{2000 + i}" for i, t in enumerate(spec.tasks())}
    plan = make_plan(spec, addresses, run_id="r", run_dir=__import__("pathlib").Path("/tmp/r"), health_address="h:1",
                     token="t", cpus=cpus)
    assert plan.task_plan(W[0]).env[env.CPUS] == "0-1" and plan.task_plan(W[1]).env[env.CPUS] == "2-3"
    assert plan.task_plan(W[1]).env["TF_NUM_INTRAOP_THREADS"] == "2" and plan.threads_per_task == 2
    assert plan.to_dict()["cpus"]["tasks"] == {"worker-0": "0-1", "worker-1": "2-3"}


def test_pss_pins_its_workers_only_and_the_spec_can_turn_it_off():
    spec = JobSpec.create(strategy=Strategy.PARAMETER_SERVER, workers=2, ps=1)
    cpus = plan_cpus(spec, cores=range(5))
    assert cpus.tasks[W[0]] == (0, 1) and cpus.tasks[W[1]] == (2, 3) and cpus.tasks[CHIEF] == (4,)
    assert not plan_cpus(JobSpec.create(workers=2, pin_cpus=False), cores=range(4)).pinned


def test_no_pin_flag_and_the_spec_files_pin_cpus():
    from orchestrator.cli import build_parser
    from orchestrator.cli.launch import spec_from_args
    from orchestrator.errors import SpecError
    from orchestrator.spec.fields import spec_fields
    from orchestrator.spec.loader import build_spec

    assert spec_from_args(build_parser().parse_args(["launch", "--workers", "2"])).pin_cpus is True
    off = spec_from_args(build_parser().parse_args(["launch", "--workers", "2", "--no-pin"]))
    assert off.pin_cpus is False and spec_fields(off)["pin_cpus"] is False
    assert build_spec(spec_fields(off), {}).pin_cpus is False  # plan.json's spec builds the same spec
    with pytest.raises(SpecError, match="pin_cpus"):
        build_spec({"pin_cpus": "no"}, {})


def test_tasks_on_other_nodes_divide_their_nodes_cores_as_one_machine_does(monkeypatch):
    """Slurm: the backend's placement -> each task's ORCH_NODE_CPUS -> on its node, the same
    division as plan_cpus over that node's cores (resolved by the task, over its step's cores)."""
    from orchestrator.resources.cores import node_share_cores
    from orchestrator.resources.cpus import node_cpus_plan, node_share_env
    from orchestrator.resources.pinning import resolve_node_share

    spec = JobSpec.create(strategy=Strategy.PARAMETER_SERVER, workers=2, ps=1)
    ps = TaskId("ps", 0)
    placement = {CHIEF: "n1", W[0]: "n2", W[1]: "n2", ps: "n2"}
    shares = {t: node_share_env(spec, placement, t)[env.NODE_CPUS] for t in placement}
    on_n2 = plan_cpus(JobSpec.create(strategy=Strategy.PARAMETER_SERVER, workers=2, ps=1), cores=range(5))
    assert node_share_cores(shares[W[0]], range(5)) == ((0, 1), 2, (4,))
    assert node_share_cores(shares[W[1]], range(5))[0] == (2, 3) == on_n2.tasks[W[1]]
    assert node_share_cores(shares[ps], range(5))[0] == (4,)
    assert node_share_cores(shares[CHIEF], range(4)) == ((), 4, ())  # alone on n1, no training task: floats
    assert node_share_cores(shares[W[0]], [7]) == ((), 1, ())  # one core for two training tasks: none pinned
    with pytest.raises(ValueError, match="ORCH_NODE_CPUS"):
        node_share_cores('{"training": 1}', range(2))
    assert node_share_env(JobSpec.create(workers=2, pin_cpus=False), placement, W[0]) == {}
    assert node_cpus_plan(spec, {}).nodes and not node_cpus_plan(spec, {"SLURM_CPU_BIND": "cores"}).nodes
    assert "SLURM_CPU_BIND=cores" in node_cpus_plan(spec, {"SLURM_CPU_BIND": "cores"}).describe()
    # the task side: what a task on n2 sets for itself (its step may use cores 0-4)
    for name in (env.CPUS, env.SERVICE_CPUS, "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS"):
        monkeypatch.setenv(name, "")  # recorded, so that what resolve_node_share sets is undone after the test
        monkeypatch.delenv(name)
    monkeypatch.setenv(env.NODE_CPUS, shares[W[1]])
    monkeypatch.setattr("orchestrator.resources.pinning.allowed_cores", lambda: list(range(5)))
    assert resolve_node_share() == (2, 3)
    got = (os.environ[env.CPUS], os.environ[env.SERVICE_CPUS], os.environ["TF_NUM_INTRAOP_THREADS"])
    assert got == ("2-3", "4", "2")
