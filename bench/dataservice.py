"""The ``dataservice`` section of ``python -m bench`` (issue 38, docs/data-service.md).

* ``data_service_examples_per_second`` / ``no_data_service_examples_per_second`` and their
  ratio: the built-in MWMS job (2 workers, the digits MLP) through the tf.data service (1 data
  worker) and without it, interleaved: the service's cost where the input is cheap.
* ``input_bound_<n>_data_workers_examples_per_second`` for n = 0, 1, 2 and their ratios to 0:
  ``bench/inputbound.py`` (an expensive ``map`` per element, a tiny step; one MWMS worker), the
  map in the trainer (0) or in n data workers.

What 2 cores can show: the service's fixed cost (gRPC hops, one more copy of each batch) and its
start (two more TensorFlow processes). What they cannot: the speed-up an input-bound job gets from
data workers on other machines; here the data workers take the cores the trainer would have run
its own map on, so at best the rows match.
"""

from __future__ import annotations

import json

from bench.stats import ratios, summarize

INPUT_BOUND = ["--", "python", "bench/inputbound.py"]


def _input_rate(run) -> float | None:
    log = run.run_dir / "attempt-0" / "worker-0" / "stdout.log"
    for line in reversed(log.read_text().splitlines() if log.exists() else []):
        if line.startswith("{") and "examples_per_second" in line:
            return float(json.loads(line)["examples_per_second"])
    return None


def section(suite, log) -> None:
    """Add the section's rows to ``suite`` (a :class:`bench.run.Suite`)."""
    rounds = 1 if suite.quick else 3
    epochs = 2 if suite.quick else 4
    cases = {"no-data-service": [], "data-service": ["--data-service", "1"]}
    rates: dict[str, list] = {k: [] for k in cases}
    for i in range(rounds):
        for name in list(cases)[i % 2:] + list(cases)[:i % 2]:
            r = suite._orchestrated(name, ["--workers", "2", "--epochs", str(epochs), "--spares", "0", *cases[name]],
                                    "worker-0")
            rates[name].append(r.coordinator.examples_per_second())
            log(f"{name}: {rates[name][-1]} examples/s")
    for name in cases:
        suite.add("11", f"{name.replace('-', '_')}_examples_per_second",
                  f"built-in MWMS 2 workers, {name.replace('-', ' ')} (2 cores)", "examples/s", rates[name])
    suite.add("11", "data_service_over_without", "built-in MWMS 2 workers: through the service / without",
              "ratio", ratios(rates["data-service"], rates["no-data-service"]))
    steps = ["--steps", "30", "--warmup", "5"] if suite.quick else ["--steps", "80", "--warmup", "10"]
    bound = {n: [] for n in (0, 1, 2)} if not suite.quick else {0: [], 1: []}
    for i in range(rounds):
        for n in list(bound)[i % len(bound):] + list(bound)[:i % len(bound)]:
            args = ["--workers", "1", "--spares", "0", *(["--data-service", str(n)] if n else []), *INPUT_BOUND, *steps]
            r = suite._orchestrated(f"input-bound-{n}", args, "worker-0")
            bound[n].append(_input_rate(r))
            log(f"input-bound, {n} data worker(s): {bound[n][-1]} examples/s")
    for n, values in bound.items():
        suite.add("11", f"input_bound_{n}_data_workers_examples_per_second",
                  f"input-bound pipeline (expensive map), 1 trainer, {n} data worker(s) (2 cores)", "examples/s",
                  [v for v in values if v is not None], None, {"runs": summarize([v for v in values if v])})
    for n in [n for n in bound if n]:
        suite.add("11", f"input_bound_{n}_data_workers_over_0", f"input-bound: {n} data worker(s) / the map in the "
                  "trainer", "ratio", ratios([v for v in bound[n] if v], [v for v in bound[0] if v]))
