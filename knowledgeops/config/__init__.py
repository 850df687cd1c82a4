"""Runtime configuration: the settings (`settings`), their checks and parsers (`values`), and
reading them at start-up with one error naming every invalid setting (`loading`)."""
