"""The supervisor's rules: pure functions over plain data, each tested by a table in ``tests/decisions``.

:mod:`.decisions` (what an exit means, success, hangs, restarts, backoff, order, culprit),
:mod:`.exitrules` (a finished task's exit, crash loops), :mod:`.hang_rules`, :mod:`.gpu` (GPU
out-of-memory), :mod:`.formed` (what the tasks formed against the plan), :mod:`.spares`,
:mod:`.rehearsal` (injected faults that cannot fire, a rehearsal that tested nothing), :mod:`.service`
(the tf.data service's tasks and the evaluator: who restarts alone, outlives a group restart, starts when).
"""
