"""Chief / worker task: the built-in training program (imports TensorFlow)."""
