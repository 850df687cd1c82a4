"""Everything that starts work: TaskQueueService, the CLI, the HTTP API, the dev launcher."""
