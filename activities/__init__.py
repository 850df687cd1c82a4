"""Activity implementations and the storage / model code they drive."""
