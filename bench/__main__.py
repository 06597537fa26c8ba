"""``python -m bench``: run the benchmark suite."""

from bench.run import main

raise SystemExit(main())
