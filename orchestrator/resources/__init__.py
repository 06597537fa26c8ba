"""What a task is given: CPU cores, GPUs, nodes (and, for several runs on one machine, the leases).

* :mod:`~orchestrator.resources.cores`: the pure division of cores among a job's tasks (shared
  with the task side); :mod:`~orchestrator.resources.cpus`: a job on this machine's cores;
  :mod:`~orchestrator.resources.pinning`: a task's own affinity (the task side's half).
* :mod:`~orchestrator.resources.gpus`: the node's GPUs (NVML, or the fake inventory);
  :mod:`~orchestrator.resources.placement`: tasks -> GPUs.
* :mod:`~orchestrator.resources.nodes`: tasks -> nodes of a Slurm allocation.

This file imports nothing: the task side imports the shared modules of the package
(``cores``, ``gpus``, ``pinning``) without the control plane's.
"""
