"""The heartbeat's ``Phase`` (``supervisor.proto``) as plain numbers and names, without protobuf.

The supervisor reads a task's phase in every heartbeat; with these it needs no protobuf import
(the runtime and the generated stubs, ~20 ms) before a launch's tasks start: protobuf comes with
the health server, after them (docs/architecture.md, "What a launch spends"). The numbers are
the proto's own: ``tests/unit/test_cli_imports.py`` checks them against the generated enum.
"""

from __future__ import annotations

PHASE_UNSPECIFIED = 0
PHASE_INITIALIZING = 1
PHASE_SERVING = 2
PHASE_TRAINING = 3
PHASE_EVALUATING = 4
PHASE_SAVING = 5
PHASE_DONE = 6
PHASE_FINISHING = 7

NAMES: dict[int, str] = {
    PHASE_UNSPECIFIED: "unspecified", PHASE_INITIALIZING: "initializing", PHASE_SERVING: "serving",
    PHASE_TRAINING: "training", PHASE_EVALUATING: "evaluating", PHASE_SAVING: "saving", PHASE_DONE: "done",
    PHASE_FINISHING: "finishing",
}
"""Every phase's number -> its name in snapshots and reports (``PHASE_TRAINING`` -> ``training``)."""


def phase_name(phase: int) -> str:
    """``training`` for ``PHASE_TRAINING``.

    Raises:
        ValueError: a number the proto does not define (as ``Phase.Name`` does).
    """
    try:
        return NAMES[phase]
    except KeyError:
        raise ValueError(f"Enum Phase has no name defined for value {phase!r}") from None
