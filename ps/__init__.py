"""Parameter-server task: tf.distribute.Server, heartbeats, and a wait for the stop signal."""
