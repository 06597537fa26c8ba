"""The Slurm backend's pure parts: placement, moving tasks off lost nodes, exit statuses, the
address book's rules, and the batch script of ``python -m orchestrator sbatch``; and, without Slurm, an
allocation that leaves lost nodes out and the node watch (:class:`~orchestrator.backends.slurm.NodeWatch`)."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

from orchestrator.backends.addresses import AddressBook
from orchestrator.backends.options import SlurmOptions
from orchestrator.backends.slurm import SlurmBackend, exit_code_of, move_off, place
from orchestrator.cli import main
from orchestrator.cli.sbatch import launch_argv
from orchestrator.errors import SpecError
from orchestrator.spec.loader import build_spec
from orchestrator.spec.model import TaskId

W0, W1, C0, P0 = TaskId("worker", 0), TaskId("worker", 1), TaskId("chief", 0), TaskId("ps", 0)


def test_one_task_per_node_when_there_are_enough_nodes():
    assert place([C0, W0, P0], ["n0", "n1", "n2", "n3"]) == {C0: "n0", W0: "n1", P0: "n2"}


def test_round_robin_with_fewer_nodes_and_a_cap_that_does_not_fit_is_bad_input():
    assert place([C0, W0, W1, P0], ["n0", "n1"]) == {C0: "n0", W0: "n1", W1: "n0", P0: "n1"}
    with pytest.raises(SpecError, match="tasks-per-node.*4 tasks do not fit on 2 node"):
        place([C0, W0, W1, P0], ["n0", "n1"], tasks_per_node=1)


def test_tasks_of_a_lost_node_move_to_the_least_loaded_node_left():
    placement = {W0: "n0", W1: "n1"}
    assert move_off(placement, [W1], ["n0", "n1", "n2"], {"n1"}, tasks_per_node=1) == {W0: "n0", W1: "n2"}


def test_no_room_left_says_why():
    why = move_off({W0: "n0", W1: "n1"}, [W1], ["n0", "n1"], {"n1"}, tasks_per_node=1)
    assert isinstance(why, str) and "n1 lost" in why and "cannot hold 1 more task" in why


def test_srun_exit_status_of_a_signalled_task_is_a_negative_signal():
    assert exit_code_of(137) == -9 and exit_code_of(143) == -15 and exit_code_of(3) == 3 and exit_code_of(0) == 0


def _spec(**raw):
    return build_spec(raw, {})


def test_the_cluster_is_ready_once_every_training_task_registered_and_the_evaluator_never_holds_it_back(tmp_path):
    book = AddressBook(_spec(workers=2, evaluator=1), tmp_path)
    assert book.register(W0, 0, "10.0.0.1", 2222) == "10.0.0.1:2222"
    assert not book.wait(W0, 0.0).ready
    got = {}
    waiter = threading.Thread(target=lambda: got.update(r=book.wait(W0, 5.0)))
    waiter.start()
    book.register(W1, 0, "10.0.0.2", 3333)
    waiter.join(5.0)
    reply = got["r"]
    assert reply.ready and json.loads(reply.tf_config)["cluster"] == {"worker": ["10.0.0.1:2222", "10.0.0.2:3333"]}
    assert json.loads((tmp_path / "cluster.json").read_text())["addresses"] == {"worker-0": "10.0.0.1:2222",
                                                                                 "worker-1": "10.0.0.2:3333"}


def test_a_restart_on_the_same_host_keeps_its_port_and_a_moved_task_gets_a_new_one():
    book = AddressBook(_spec(workers=2), None)
    book.register(W0, 0, "10.0.0.1", 2222)
    book.register(W1, 0, "10.0.0.2", 3333)
    book.forget(W0)
    book.forget(W1)
    assert not book.wait(W0, 0.0).ready  # a group restart: nobody gets the old cluster
    book.expect(W0, 1)
    assert book.register(W0, 1, "10.0.0.1", 4444) == "10.0.0.1:2222"
    assert book.register(W1, 1, "10.0.0.3", 5555) == "10.0.0.3:5555"
    assert json.loads(book.wait(W1, 0.0).tf_config)["cluster"]["worker"] == ["10.0.0.1:2222", "10.0.0.3:5555"]


def test_a_stale_attempt_or_an_unknown_task_is_refused():
    book = AddressBook(_spec(workers=2), None)
    book.expect(W0, 2)
    with pytest.raises(ValueError, match="stale"):
        book.register(W0, 1, "10.0.0.1", 2222)
    with pytest.raises(ValueError, match="not a task of this job"):
        book.register(TaskId("worker", 7), 0, "10.0.0.1", 2222)


def test_sbatch_writes_a_script_for_the_nodes_the_placement_needs(tmp_path, capsys):
    out = tmp_path / "job.sh"
    runs = tmp_path / "runs"
    assert main(["sbatch", "--strategy", "parameter_server", "--workers", "2", "--ps", "1", "--epochs", "3",
                 "--runs-dir", str(runs), "-o", str(out)]) == 0
    text = out.read_text()
    assert "#SBATCH --nodes=4" in text and "#SBATCH --no-kill" in text
    assert f"#SBATCH --output={runs}/slurm-%j.out" in text and runs.is_dir()
    last = text.strip().splitlines()[-1]
    assert last.startswith("exec ") and "launch --backend slurm --plain --strategy parameter_server --workers 2" in last
    assert " -o " not in last


def test_sbatch_with_too_few_nodes_is_bad_input(tmp_path, capsys):
    assert main(["sbatch", "--workers", "3", "--nodes", "2", "-o", str(tmp_path / "job.sh")]) == 2
    assert "nodes=2: 3 tasks need 3 node(s)" in capsys.readouterr().err
    assert not (tmp_path / "job.sh").exists()


def test_launch_argv_leaves_out_the_options_of_sbatch_itself():
    assert launch_argv(["-v", "sbatch", "--workers", "2", "-o", "job.sh", "--nodes=3", "--partition", "gpu",
                        "--epochs", "1"]) == ["--workers", "2", "--epochs", "1"]


D0, DW0 = TaskId("dispatcher", 0), TaskId("data_worker", 0)


def test_the_data_service_registers_in_its_start_order_and_every_reply_carries_the_dispatcher(tmp_path):
    # issue 38 on Slurm: the dispatcher is ready alone, a data worker once the dispatcher is known,
    # a trainer once the training cluster and the dispatcher are; the service's addresses ride in `env`
    book = AddressBook(_spec(workers=2, data_service=1), tmp_path)
    assert book.register(D0, 0, "10.0.0.1", 2000) == "10.0.0.1:2000"
    reply = book.wait(D0, 0.0)
    assert reply.ready and reply.env == {"ORCH_DATA_SERVICE_ADDRESS": "10.0.0.1:2000",
                                         "ORCH_TASK_ADDRESS": "10.0.0.1:2000"}
    assert json.loads(reply.tf_config) == {"cluster": {}, "task": {"type": "dispatcher", "index": 0},
                                           "rpc_layer": "grpc"}
    book.register(DW0, 0, "10.0.0.2", 2001)
    assert book.wait(DW0, 0.0).env == {"ORCH_DATA_SERVICE_ADDRESS": "10.0.0.1:2000",
                                       "ORCH_TASK_ADDRESS": "10.0.0.2:2001"}
    book.register(W0, 0, "10.0.0.3", 2222)
    assert not book.wait(W0, 0.0).ready  # worker-1 is missing
    book.register(W1, 0, "10.0.0.1", 2223)
    reply = book.wait(W1, 0.0)
    assert reply.ready and reply.env == {"ORCH_DATA_SERVICE_ADDRESS": "10.0.0.1:2000"}
    assert json.loads(reply.tf_config)["cluster"] == {"worker": ["10.0.0.3:2222", "10.0.0.1:2223"]}
    assert json.loads((tmp_path / "cluster.json").read_text())["addresses"] == {
        "dispatcher-0": "10.0.0.1:2000", "data_worker-0": "10.0.0.2:2001", "worker-0": "10.0.0.3:2222",
        "worker-1": "10.0.0.1:2223"}


def test_a_restarting_dispatcher_holds_back_data_workers_and_trainers_until_it_registers_again():
    book = AddressBook(_spec(workers=1, data_service=1), None)
    book.register(D0, 0, "10.0.0.1", 2000)
    book.register(W0, 0, "10.0.0.3", 2222)
    book.forget(D0)
    assert not book.wait(DW0, 0.0).ready and not book.wait(W0, 0.0).ready
    book.expect(D0, 1)
    assert book.register(D0, 1, "10.0.0.1", 4444) == "10.0.0.1:2000"  # the same port: its clients reconnect
    assert book.wait(W0, 0.0).env == {"ORCH_DATA_SERVICE_ADDRESS": "10.0.0.1:2000"}


def _backend_in(tmp_path, work_dir: str, answer: str):
    """A SlurmBackend opened on 2 nodes whose probe step prints ``answer`` for node 1 (a token or "missing")."""
    import subprocess

    from orchestrator.backends import slurm_commands
    from orchestrator.backends.slurm import SlurmBackend, SlurmOptions

    backend = SlurmBackend(SlurmOptions(environ={}))
    backend.nodes, backend.run_id, backend.run_dir = ["n0", "n1"], "r", tmp_path / "runs" / "r"

    def fake(environ, *argv, timeout_s=0.0):
        probe = next(p for p in Path(work_dir).iterdir() if p.name.startswith(".shared-check-"))
        token = probe.read_text()
        return subprocess.CompletedProcess(argv, 0, f"0: {token}\n1: {token if answer == 'token' else answer}\n", "")

    return backend, slurm_commands, fake


def test_a_work_dir_the_nodes_do_not_share_is_bad_input_naming_the_field(tmp_path, monkeypatch):
    work_dir = tmp_path / "node-local"
    backend, slurm_commands, fake = _backend_in(tmp_path, str(work_dir), "missing")
    monkeypatch.setattr(slurm_commands, "command", fake)
    with pytest.raises(SpecError, match=r"data_service\.work_dir.*is not shared: node\(s\) n1"):
        backend.allocate(_spec(workers=2, data_service={"workers": 1, "work_dir": str(work_dir)}))
    assert not [p for p in work_dir.iterdir()]  # the probe file went


def test_a_work_dir_in_the_runs_directory_or_read_back_everywhere_is_taken(tmp_path, monkeypatch):
    work_dir = tmp_path / "nfs"
    backend, slurm_commands, fake = _backend_in(tmp_path, str(work_dir), "token")
    monkeypatch.setattr(slurm_commands, "command", fake)
    addresses = backend.allocate(_spec(workers=2, data_service={"workers": 1, "work_dir": str(work_dir)}))
    assert set(addresses) == {D0, DW0, W0, W1}
    monkeypatch.setattr(slurm_commands, "command", None)  # under the runs directory: no probe at all
    backend.allocate(_spec(workers=2, data_service={"workers": 1, "work_dir": str(tmp_path / "runs" / "journal")}))


def test_an_allocation_places_no_task_on_a_lost_node_and_the_node_watch_names_lost_nodes():
    # the next life of an elastic run after a lost node (docs/elastic.md#slurm): allocate() again, on the nodes left
    backend = SlurmBackend(SlurmOptions(environ={}))
    backend.nodes, backend.lost = ["n0", "n1", "n2"], {"n0"}
    backend.allocate(_spec(workers=2))
    assert backend.placement == {W0: "n1", W1: "n2"}
    with socket.socket() as listening:  # n1's and n2's slurmd: a port that answers
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        backend.node_addr, backend.slurmd_port = {"n1": "127.0.0.1", "n2": "127.0.0.1"}, listening.getsockname()[1]
        assert backend.lost_nodes.node_of(W0) is None and backend.lost_nodes.node_of(TaskId("ps", 0)) is None
    assert backend.lost_nodes.node_of(W1) == "n2" and backend.lost == {"n0", "n2"}  # it no longer answers: lost
    backend.lost = {"n0", "n1", "n2"}
    with pytest.raises(SpecError, match="every node of the allocation is lost"):
        backend.allocate(_spec(workers=1))
