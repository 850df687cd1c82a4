"""The one registry of task types: the shapes a type is declared in (`spec`), the entries by
family (`families/`), and the assembled REGISTRY with its queues and pools (`task_types`)."""
