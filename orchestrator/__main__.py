"""``python -m orchestrator``: the command line (:mod:`orchestrator.cli`)."""

import sys

from orchestrator import env

env.bench_mark("cli-start", sys.stderr)  # bench/timeline.py: the interpreter is up, the CLI not yet imported

from orchestrator.cli import main  # noqa: E402

raise SystemExit(main())
