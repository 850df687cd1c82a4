"""The registry's entries, by family; `knowledgeops/task_types.py` assembles REGISTRY."""
