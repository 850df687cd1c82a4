"""What the processes tell operators: Prometheus metrics, OpenTelemetry tracing, and the JSON
log line format."""
