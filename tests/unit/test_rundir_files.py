"""Files of the run directory written for others to read while the job runs."""

from __future__ import annotations

import stat

import pytest

from orchestrator.rundir import write_private


def test_a_private_file_is_0600_whole_and_never_overwritten(tmp_path):
    path = tmp_path / "endpoint.json"
    write_private(path, '{"address": "127.0.0.1:1"}\n')
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == '{"address": "127.0.0.1:1"}\n'
    with pytest.raises(FileExistsError):
        write_private(path, "{}\n")
    assert path.read_text() == '{"address": "127.0.0.1:1"}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["endpoint.json"]  # nothing written beside it is left
