"""What app code calls to start and read work: TaskQueueService (`tasks`), task queries and
listing, documents, search, admission, re-index, the agent's conversations and webhook delivery.
The CLI and the HTTP API are thin layers over these."""
