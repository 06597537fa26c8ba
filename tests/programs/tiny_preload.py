"""A module that imports at once: stands in for TensorFlow in a spare's preload (tests)."""
