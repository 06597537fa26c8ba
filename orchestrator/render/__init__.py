"""Renderings of a plan for engines we hand off to: a dry run, in TorchX's words.

:mod:`orchestrator.render.compose` writes a Docker Compose file, :mod:`orchestrator.render.kubernetes`
a Kubeflow ``TFJob`` manifest, :mod:`orchestrator.render.jobset` a ``JobSet`` manifest (Kubernetes
without Kubeflow's legacy operator). Nothing here starts a process: that is what
:mod:`orchestrator.backends` does.
"""
