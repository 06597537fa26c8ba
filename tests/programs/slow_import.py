"""A module whose import takes 30 s: stands in for TensorFlow in a spare's preload (tests)."""

import time

time.sleep(30)
