"""Health channel: the orchestrator's gRPC server and the task-side heartbeat client."""
