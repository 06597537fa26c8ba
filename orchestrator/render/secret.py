"""``render --format tfjob|jobset``: the job's certificates reach its pods from a Kubernetes Secret.

A launch gives each task its client certificate by path (``ORCH_TLS_DIR``, :mod:`orchestrator.tls`);
a Kubernetes rendering cannot write into its pods, so every pod template mounts one Secret of the
job (default ``<job>-tls``) read-only at :data:`MOUNT_PATH`, files mode 0400 (``defaultMode``;
with a pod ``securityContext.fsGroup`` the kubelet makes them 0440 for that group, which a
non-root image needs), and gets ``ORCH_TLS_DIR`` pointing there. A task picks its own
``<task>.crt`` / ``.key`` from the mount by its name (:func:`orchestrator.tls.files_for`), the
shared ``tasks.crt`` past 512 tasks. Kubernetes' unit of access is the Secret: every pod of the
job can read every file of it (an Indexed Job has one pod template, so one Secret per pod is not
expressible), so on Kubernetes a task's certificate names it but does not keep it from another
pod of the same job.

``render --tls-out DIR`` writes the files (:func:`orchestrator.tls.make_secret_files`) and says
on stderr how to make the Secret: ``kubectl create secret generic NAME --from-file=DIR`` (in the
job's namespace, before ``kubectl apply``: a pod whose Secret is missing waits in
``ContainerCreating``). ``render --insecure``: no Secret, no ``ORCH_TLS_DIR``.
"""

from __future__ import annotations

import copy
import re
import shlex
from collections.abc import Iterator

from orchestrator import env
from orchestrator.errors import SpecError

MOUNT_PATH = "/etc/tfcluster/tls"
"""Where every pod mounts the job's Secret (its ``ORCH_TLS_DIR``)."""
VOLUME = "tls"
MODE = 0o400
"""The Secret's files in the pod: read by their owner only (``defaultMode``)."""
_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def default_secret(job: str) -> str:
    """The Secret of job ``job`` when ``--tls-secret`` is not given: ``<job>-tls``."""
    return f"{job}-tls"


def check_secret_name(name: str) -> None:
    """Raise SpecError unless ``name`` is a Secret name (a DNS-1123 subdomain: apimachinery's
    ``IsDNS1123Subdomain``, what ``ValidateSecretName`` uses)."""
    if not _SUBDOMAIN.match(name):
        raise SpecError("tls-secret", name, "not a Kubernetes Secret name",
                        "use lowercase letters, digits, - and ., e.g. --tls-secret digits-tls")


def pod_specs(manifest: dict) -> Iterator[dict]:
    """Every pod spec of a rendered TFJob or JobSet (the dicts themselves, to change in place)."""
    spec = manifest.get("spec") or {}
    for replica in (spec.get("tfReplicaSpecs") or {}).values():
        yield replica["template"]["spec"]
    for rjob in spec.get("replicatedJobs") or []:
        yield rjob["template"]["spec"]["template"]["spec"]


def with_tls_secret(manifest: dict, secret: str) -> dict:
    """``manifest`` (a TFJob or JobSet) with every pod mounting Secret ``secret`` read-only at
    :data:`MOUNT_PATH` and ``ORCH_TLS_DIR`` set to it in the ``tensorflow`` container (a copy).

    Raises:
        SpecError: ``secret`` is not a Secret name.
    """
    check_secret_name(secret)
    out = copy.deepcopy(manifest)
    for pod in pod_specs(out):
        pod.setdefault("volumes", []).append(
            {"name": VOLUME, "secret": {"secretName": secret, "defaultMode": MODE}})
        for container in pod["containers"]:
            if container["name"] != "tensorflow":
                continue
            container.setdefault("volumeMounts", []).append(
                {"name": VOLUME, "mountPath": MOUNT_PATH, "readOnly": True})
            container.setdefault("env", []).append({"name": env.TLS_DIR, "value": MOUNT_PATH})
    return out


def create_command(secret: str, folder: str) -> str:
    """The command that makes the Secret from ``render --tls-out``'s folder."""
    return f"kubectl create secret generic {shlex.quote(secret)} --from-file={shlex.quote(folder)}"
