"""A run on disk: atomic checkpoints that resume exactly, and one run per output folder."""
