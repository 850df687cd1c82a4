"""Object storage: one interface (`Store`) over a local folder or an S3 bucket."""
