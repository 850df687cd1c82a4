"""The agent task type's domain: its tools (schemas and what each does) and its transcript."""
