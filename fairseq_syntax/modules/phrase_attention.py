"""Attention over the words and the phrases of a source tree (Eriguchi et al. 2016, eq. 13)."""
from fairseq_syntax.modules.global_attention import GlobalAttentionLayer


class PhraseAttentionLayer(GlobalAttentionLayer):
    """Eq. 13: one softmax over the ``S`` words and ``M`` phrases of ``word_phrase_annotations``;
    weights ``[B, S + M]``, words first (the decoder keeps ``[:S]`` as ``extra["attn"]``).
    """

    memory_key = "word_phrase_annotations"
    mask_key = "word_phrase_mask"
