"""The suite's own lanes (tests/conftest.py) and the Slurm tests' hold on their one cluster (slurm/conftest.py)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import BESIDE_THE_MACHINE_LANE, REPO, lane_scope
from tests.slurm.conftest import cluster_lock

TIME_LIMIT = "tests/slurm/test_slurm_preemption.py::test_a_run_longer_than_its_time_limit_continues_in_three_lives"
SPEC = "tests/e2e/test_render_cluster.py::test_every_example_spec_launches"


def test_machine_tests_share_one_unit_and_the_others_each_have_their_own():
    for nodeid in ("tests/e2e/test_recovery.py::test_pss_worker_sigkill_restarts_only_that_worker",
                   "tests/slurm/test_slurm_elastic.py::test_pss_on_three_nodes_a_lost_node_parks_its_worker_and_the_chief_trains_on",
                   "tests/docker/test_containers.py::test_compose_up_runs_the_job_and_ends_with_the_coordinator[pss]",
                   "tests/browser/test_web_page.py::test_the_page_shows_the_job_live_in_chromium"):
        assert lane_scope(nodeid) == "machine", nodeid
    for nodeid in ("tests/unit/test_spec.py::test_x", "tests/benchmarks/test_quick_bench.py::test_y",
                   "tests/integration/test_e2e_like.py::test_z[e2e]"):
        assert lane_scope(nodeid) == nodeid


def test_the_tests_beside_the_machine_lane_are_units_of_their_own_every_parameter_too():
    assert lane_scope(TIME_LIMIT) == TIME_LIMIT
    assert lane_scope(f"{SPEC}[mwms-4-workers.yaml]") == f"{SPEC}[mwms-4-workers.yaml]"
    assert lane_scope("tests/e2e/test_render_cluster.py::test_rendered_tf_configs_form_a_pss_cluster") == "machine"


def test_every_test_named_beside_the_machine_lane_exists():
    """A renamed test would silently go back into the machine lane."""
    for name in BESIDE_THE_MACHINE_LANE:
        path, function = name.split("::")
        assert f"def {function}(" in (REPO / path).read_text(), name


HOLD = """
import sys
sys.path.insert(0, {repo!r})
from tests.slurm.conftest import cluster_lock
try:
    with cluster_lock(timeout_s={timeout_s}, path={path!r}):
        print("held", flush=True)
except BaseException as exc:  # pytest.fail raises a BaseException (Failed)
    print(f"not held: {{exc}}", flush=True)
"""


def _other_process_takes(path: str, timeout_s: float) -> str:
    code = HOLD.format(repo=str(REPO), timeout_s=timeout_s, path=path)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout.strip()


def test_one_process_at_a_time_holds_the_cluster_and_a_waiter_gives_up_naming_the_lock(tmp_path):
    path = str(tmp_path / "cluster.lock")
    with cluster_lock(timeout_s=5, path=path):
        out = _other_process_takes(path, 0.5)
        assert out == f"not held: timed out after 0.5 s waiting for the Slurm cluster lock {path}, held by another test"
    assert _other_process_takes(path, 5) == "held"  # released at the end of the block
