"""A cluster manager for distributed TensorFlow training. Never imports TensorFlow."""

__version__ = "0.1.0"
