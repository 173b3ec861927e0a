"""Model ``attentional_rnn``: the attentional RNN encoder-decoder all methods extend."""
from dataclasses import dataclass, field
from typing import List, Optional, Set

import torch.nn as nn
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.models import FairseqEncoderDecoderModel, register_model

from fairseq_syntax.data.side_inputs import model_input_keys
from fairseq_syntax.modules.global_attention import GlobalAttentionLayer
from fairseq_syntax.modules.initialization import init_uniform_
from fairseq_syntax.modules.rnn_decoder import RNNDecoder
from fairseq_syntax.modules.rnn_encoder import RNNEncoder

ATTENTION_SCORES = ChoiceEnum(["general", "dot"])


@dataclass
class AttentionalRNNConfig(FairseqDataclass):
    dropout: float = field(
        default=0.2,
        metadata={"help": "dropout on embeddings, encoder outputs, between decoder layers "
                  "and on the attentional state"},
    )
    encoder_embed_dim: int = field(default=256, metadata={"help": "source embedding size"})
    encoder_hidden_size: int = field(
        default=256, metadata={"help": "hidden size of each direction of the BiLSTM encoder"}
    )
    encoder_layers: int = field(default=1, metadata={"help": "number of BiLSTM encoder layers"})
    decoder_embed_dim: int = field(default=256, metadata={"help": "target embedding size"})
    decoder_hidden_size: int = field(
        default=512, metadata={"help": "hidden size of the decoder LSTM and of the attentional state"}
    )
    decoder_out_embed_dim: Optional[int] = field(
        default=None,
        metadata={"help": "size the attentional state is projected to before the output "
                  "layer, as fairseq lstm's --decoder-out-embed-dim (default: "
                  "--decoder-embed-dim)"},
    )
    decoder_layers: int = field(default=1, metadata={"help": "number of stacked decoder LSTM layers"})
    attention_score: ATTENTION_SCORES = field(
        default="general",
        metadata={"help": "Luong score: 'general' (h_t^T W_a h_s) or 'dot' (h_t^T h_s; needs "
                  "decoder-hidden-size == 2 * encoder-hidden-size)"},
    )
    share_decoder_input_output_embed: bool = field(
        default=False,
        metadata={"help": "tie the decoder's input embedding and output matrix (needs "
                  "--decoder-out-embed-dim equal to --decoder-embed-dim; on in the sa_nmt* and "
                  "fa_nmt* presets, as Tran & Bisk 2018, §5.2)"},
    )
    init_uniform: float = field(
        default=0.1,
        metadata={"help": "draw every parameter (the mechanism's too) from U(-x, x), as "
                  "fairseq's lstm does; 0 keeps PyTorch's default initialisation"},
    )


@register_model("attentional_rnn", dataclass=AttentionalRNNConfig)
class AttentionalRNNModel(FairseqEncoderDecoderModel):
    """BiLSTM encoder, stacked-LSTM decoder with input feeding and Luong global
    attention (Luong et al. 2015, "Effective Approaches to Attention-based NMT").

    Each paper's model is a subclass that overrides one hook:
    ``build_attention`` (the attentional layer of the decoder: an attention variant, an
    extra context vector, a decoder-state cache) or ``build_encoder_extensions``
    (modules applied to the encoder output), and declares the side inputs it reads in
    :meth:`side_inputs`, which the ``syntax_translation`` task then loads and the encoder
    passes on in its output.
    """

    @classmethod
    def side_inputs(cls, cfg) -> Set[str]:
        """Names of :data:`~fairseq_syntax.data.side_inputs.SIDE_INPUTS` the model reads
        with the options ``cfg``."""
        return set()

    @classmethod
    def build_attention(cls, cfg, query_dim: int, key_dim: int) -> nn.Module:
        return GlobalAttentionLayer(query_dim, key_dim, cfg.attention_score)

    @classmethod
    def build_encoder_extensions(cls, cfg, encoder_dim: int) -> List[nn.Module]:
        return []

    @classmethod
    def build_model(cls, cfg, task):
        encoder_dim = 2 * cfg.encoder_hidden_size
        encoder = RNNEncoder(
            task.source_dictionary, cfg.encoder_embed_dim, cfg.encoder_hidden_size,
            cfg.encoder_layers, cfg.dropout, cls.build_encoder_extensions(cfg, encoder_dim),
            side_input_keys=model_input_keys(cls.side_inputs(cfg)),
        )
        decoder = RNNDecoder(
            task.target_dictionary, cfg.decoder_embed_dim, cfg.decoder_hidden_size,
            cfg.decoder_layers, cfg.dropout, encoder.output_dim,
            cls.build_attention(cfg, cfg.decoder_hidden_size, encoder.output_dim),
            share_input_output_embed=cfg.share_decoder_input_output_embed,
            out_embed_dim=cfg.decoder_out_embed_dim or cfg.decoder_embed_dim,
        )
        model = cls(encoder, decoder)
        if cfg.init_uniform > 0:
            init_uniform_(model, cfg.init_uniform)
        return model

    def forward(self, src_tokens, src_lengths, prev_output_tokens, **side_inputs):
        encoder_out = self.encoder(src_tokens, src_lengths, **side_inputs)
        return self.decoder(prev_output_tokens, encoder_out=encoder_out)
