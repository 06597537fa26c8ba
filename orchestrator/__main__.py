"""``python -m orchestrator``: the command line (:mod:`orchestrator.cli`)."""

from orchestrator.cli import main

raise SystemExit(main())
