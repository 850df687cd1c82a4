"""The vector index: one interface (`vector_index.VectorIndex`) over two Qdrant engines, the
embedded Qdrant Edge and a Qdrant server. Import the modules themselves: this package imports
nothing, so contracts and workflows can name its small types without loading an engine."""
