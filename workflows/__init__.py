"""Workflow definitions, one module per task type."""

from workflows.document_import import DocumentImportWorkflow

# Every workflow a worker registers; tests check this matches the task-type registry.
WORKFLOWS: list[type] = [DocumentImportWorkflow]
