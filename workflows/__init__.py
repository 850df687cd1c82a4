"""Workflow definitions, one module per task type; `base` holds what every workflow shares.

Which workflow serves which task type is declared in the registry
(knowledgeops/registry/task_types.py), and the worker registers exactly what it declares.
"""
