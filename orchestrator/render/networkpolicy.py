"""``render --format tfjob|jobset --isolate-network``: a NetworkPolicy that admits to the job's pods
only the job's own pods.

TensorFlow's gRPC server in every pod binds every interface without credentials (TF SECURITY.md),
and a Kubernetes cluster's pod network lets every pod reach every other by default. The policy
selects the job's pods by the label their controller sets on each of them and allows ingress
from those same pods only (``policyTypes: [Ingress]``; egress stays open: the pods still reach
storage and DNS). It takes effect only where the cluster's network plugin enforces
NetworkPolicy (Calico, Cilium, ...; the kubelet's probes come from the node and are not subject
to it on those plugins). These renderings report to no orchestrator (their pods get no health
address), so there is no health port to admit; a job that adds one admits it by adding a rule.
"""

from __future__ import annotations

from orchestrator.render.kubernetes import MANAGED_BY

POD_LABEL = {
    "jobset": "jobset.sigs.k8s.io/jobset-name",  # set on every pod by the JobSet controller
    "tfjob": "training.kubeflow.org/job-name",  # set on every pod by Kubeflow's training operator
}
"""The label each controller puts on every pod of the job, valued with the job's name."""


def network_policy(name: str, fmt: str) -> dict:
    """The NetworkPolicy of the job ``name`` rendered as ``fmt`` (``tfjob`` or ``jobset``).

    Raises:
        KeyError: ``fmt`` is not a Kubernetes format.
    """
    def pods() -> dict:  # a new dict at each place: no YAML aliases in the output
        return {"matchLabels": {POD_LABEL[fmt]: name}}

    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": f"{name}-isolate", "labels": {"app.kubernetes.io/managed-by": MANAGED_BY}},
        "spec": {"podSelector": pods(), "policyTypes": ["Ingress"], "ingress": [{"from": [{"podSelector": pods()}]}]},
    }
