"""What a running process is built from: the shared resources (`resources`), the Temporal
client (`temporal`), the schedules it keeps, and the reconciling of operator actions taken
outside the API (`operator_actions`)."""
