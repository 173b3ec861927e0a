"""The special values of the side tensors (docs/design.md §3.2): padding, eos, root.

Torch-free, so that the collater (``data/``) and the layers that read the tensors
(``modules/``) share them without ``modules/`` importing ``data/``.
"""

HEAD_PAD = -2
"""Value of ``src_heads`` at padding positions (``-1`` marks the root)."""

WORD_PAD = -2
"""Value of ``src_words`` at padding positions (``-1`` marks eos, which is not a word)."""

EOS_WORD = -1
"""Word index of ``eos`` in the ``words`` side-file and ``src_words``."""

PAD_DISTANCE = 10_000
"""Value of ``src_distances`` wherever a row or column is padding: larger than any
real path length, so a test "within syntax distance n" excludes padding by itself."""

EOS_DISTANCE = 1_000
"""Distance between ``eos`` and every subword token (docs/design.md §3.3: eos is not a
word, it is farther from every word than any window). It exceeds every window a model
uses (syntax-directed attention refuses a syntax distance ``n >= EOS_DISTANCE``) and is
below :data:`PAD_DISTANCE`; ``eos`` is at distance 0 from itself. Only the distances are
affected: global attention (and the global context of the double-context models) still
weighs ``eos``."""
