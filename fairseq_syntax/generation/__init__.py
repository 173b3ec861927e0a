"""Decoding: the target-length prior and the beam search that uses it (Eriguchi et al.
2016, eqs. 16-17)."""
