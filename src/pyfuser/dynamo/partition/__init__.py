"""Partitioning: an ATen graph split into fusible regions and the ATen ops between them
(``partitioner.fuse_regions``)."""
