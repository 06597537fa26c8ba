"""Health channel, orchestrator side: the gRPC server tasks stream heartbeats to.

The task side of the channel (the heartbeat reporter, the task's own ``grpc.health.v1``
server and probe) is in :mod:`orchestrator.task`.
"""
