"""CLEANUP_EXECUTE's listing and judging, free of Temporal: what is still needed (`needed`),
what is in a folder and the store with its size and age (`listing`), the rules that make an
item an orphan and name it (`orphans`), the scans that list each kind (`scans`), removing one
item after judging it again (`removal`) and the plan file between the two (`plan`). The
activities in `activities/cleanup.py` call these and add heartbeats and checkpoints."""
