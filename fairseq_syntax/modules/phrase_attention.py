"""Attention over the words and the phrases of a source tree (Eriguchi et al. 2016, eq. 13)."""
from fairseq_syntax.modules.global_attention import GlobalAttentionLayer


class PhraseAttentionLayer(GlobalAttentionLayer):
    """Luong attention whose keys are the word annotations followed by the phrase states.

    Eq. 13: ``d_j = Σ_{i<=n} α_j(i) h_i + Σ_{i>n} α_j(i) h_i^(phr)``, one softmax over the
    ``S`` word positions and the ``M`` phrase rows. The tree encoder puts both in
    ``encoder_out["word_phrase_annotations"] [B, S + M, C]`` with the mask
    ``word_phrase_mask`` (True for padding, for phrase padding rows and for every phrase
    row of a sentence without a tree), once per batch, so that a decoding step is one
    softmax and one weighted sum, as in the backbone. The weights returned are
    ``[B, S + M]``, words first; the decoder keeps the first ``S`` columns for
    ``extra["attn"]`` (``--print-alignment``), so alignments stay over source positions.
    """

    memory_key = "word_phrase_annotations"
    mask_key = "word_phrase_mask"
