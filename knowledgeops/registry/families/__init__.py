"""The registry's entries, by family; `knowledgeops/registry/task_types.py` assembles REGISTRY."""
