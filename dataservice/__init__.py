"""Entrypoint of the tf.data service's tasks: ``dispatcher`` and ``data_worker``."""
