"""Data: the dataset that carries syntax tensors, side-file I/O, the synthetic corpus."""
