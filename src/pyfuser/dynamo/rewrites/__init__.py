"""Graph rewrites: ATen graphs reshaped for fusion before partitioning, one pass per module."""
