"""Contracts shared by workflows, activities and starters: task types, payload models, settings."""
