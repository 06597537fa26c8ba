"""Job specs, the TF topology rules and TF_CONFIG rendering (no TensorFlow needed)."""

from orchestrator.spec.model import TASK_TYPES, JobSpec, Strategy, TaskId, TrainingSpec
from orchestrator.spec.tfconfig import cluster_spec, tf_config, tf_config_json

__all__ = ["TASK_TYPES", "JobSpec", "Strategy", "TaskId", "TrainingSpec", "cluster_spec", "tf_config", "tf_config_json"]
