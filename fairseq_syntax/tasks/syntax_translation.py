"""Task ``syntax_translation``: translation whose batches carry source syntax."""
import copy
import logging
import os
from dataclasses import dataclass, field
from typing import Optional

from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask
from omegaconf import DictConfig, open_dict

from fairseq_syntax.data import side_inputs
from fairseq_syntax.data.side_files import (
    check_fairseq_binaries, check_format_version, check_side_file_checksum, read_side_file,
    side_file_prefix,
)
from fairseq_syntax.data.side_inputs import SIDE_INPUTS
from fairseq_syntax.data.syntax_dataset import SyntaxLanguagePairDataset

logger = logging.getLogger(__name__)


@dataclass
class SyntaxTranslationConfig(TranslationConfig):
    left_pad_source: bool = field(
        default=False,
        metadata={
            "help": "pad the source on the left; keep False: syntax side tensors and "
            "attention weights index source positions from the left"
        },
    )
    load_heads: bool = field(
        default=False,
        metadata={
            "help": "load the dependency heads side-file ({split}.{src}-{tgt}.{src}.heads) "
            "into net_input['src_heads'] (also switched on when the architecture needs it)"
        },
    )
    load_distances: bool = field(
        default=False,
        metadata={
            "help": "compute the distances between source words (tree path lengths, spread "
            "to each word's subword pieces; eos farther than any window) in the collater, "
            "net_input['src_distances'] [B, S, S], from the heads and words side-files "
            "(implies --load-heads; also gives net_input['src_words']; switched on when the "
            "architecture needs them)"
        },
    )
    load_tree: bool = field(
        default=False,
        metadata={
            "help": "load the binary-tree side-file ({split}.{src}-{tgt}.{src}.tree) into "
            "net_input['src_tree'] (switched on when the architecture needs it)"
        },
    )
    length_prior: bool = field(
        default=False,
        metadata={
            "help": "beam search with the length prior of Eriguchi et al. 2016 (eqs. 16-17): "
            "at each step t the candidate that ends a hypothesis (eos after t tokens) gets "
            "w * log p(t | len(x)) added before the top-k, so the prior decides which "
            "hypotheses finish; p from the training length statistics in the data-bin's "
            "syntax_manifest.json, smoothed towards a Gaussian of the length ratio. Scores "
            "are unnormalised sums plus the prior, as in eq. 16: implies --unnormalized, and "
            "--lenpen other than 1 (which acts only on normalised scores) is an error, as are "
            "--sampling, --diverse-beam-groups, --match-source-len, --diversity-rate and "
            "--constraints (the prior is part of fairseq's plain beam search)"
        },
    )
    length_prior_weight: float = field(
        default=1.0, metadata={"help": "weight w of the length prior (the paper uses 1)"}
    )
    length_prior_smoothing: float = field(
        default=1.0,
        metadata={"help": "pseudo-count k of the length prior's Gaussian backoff: "
                  "p(m|n) = (c(n,m) + k g(m|n)) / (c(n) + k)"},
    )
    raw_input_parser: Optional[str] = field(
        default=None,
        metadata={
            "help": "fairseq-interactive: the spaCy pipeline (name or folder) that parses raw "
            "input; default: the one recorded in the data-bin's syntax_manifest.json"
        },
    )
    raw_input_tokenizer: str = field(
        default="auto",
        metadata={
            "help": "fairseq-interactive: how raw input is split into words before subwords: "
            "'parser' (the spaCy pipeline's tokenizer), 'whitespace' (input is tokenised), "
            "'auto' (as the data-bin's manifest records for the training text)"
        },
    )


@register_task("syntax_translation", dataclass=SyntaxTranslationConfig)
class SyntaxTranslationTask(TranslationTask):
    """Translation whose batches carry source dependency heads, tree-distance matrices,
    binary trees and word alignments (docs/design.md §3).

    A side input (:data:`~fairseq_syntax.data.side_inputs.SIDE_INPUTS`) is loaded when
    its option is given or when the model or the criterion (built before the data is
    loaded, by fairseq-train and fairseq-generate alike) declares it in its class method
    ``side_inputs(cfg)``; a model that needs none pays nothing. A data-bin whose manifest
    records another side-file ``format_version`` is refused as soon as a side-file is
    loaded, with the command that rebuilds it.
    """

    cfg: SyntaxTranslationConfig

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        self.declared_inputs = set()  # what the model and the criterion declare
        self._raw_input = None  # fairseq-interactive's RawInputAdapter, made on first use

    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        self.declared_inputs |= side_inputs.declared_by(type(model), cfg)
        return model

    def build_criterion(self, cfg, from_checkpoint=False):
        criterion = super().build_criterion(cfg, from_checkpoint)
        self.declared_inputs |= side_inputs.declared_by(type(criterion), cfg)
        return criterion

    @property
    def requested_inputs(self):
        """The side inputs asked for (declared, or by their option) and what they imply."""
        options = {name for name, spec in SIDE_INPUTS.items()
                   if spec.option and getattr(self.cfg, spec.option, False)}
        return side_inputs.requested(self.declared_inputs | options)

    @property
    def fairseq_alignments(self) -> bool:
        """Whether batches also carry fairseq's own ``alignments`` and ``align_weights``
        (built sentence by sentence): only when alignments are loaded and no model or
        criterion of the plugin declared them, so that fairseq's own
        ``label_smoothed_cross_entropy_with_alignment`` may be reading them. The plugin's
        readers take ``alignment_links``."""
        return "alignments" in self.requested_inputs and "alignments" not in self.declared_inputs

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        wanted = self.requested_inputs
        for name in wanted:  # those fairseq's own dataset loads: switch its option on
            spec = SIDE_INPUTS[name]
            if not spec.side_file and not spec.computed_from:
                setattr(self.cfg, spec.option, True)
        data_path = self.cfg.data.split(":")[0]
        src, tgt = self.cfg.source_lang, self.cfg.target_lang
        # a token or alignment binary cut short: named here, not by the first batch it fails
        check_fairseq_binaries(data_path, split, src, tgt,
                               alignments=getattr(self.cfg, "load_alignments", False))
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        files = [spec for name, spec in SIDE_INPUTS.items()
                 if spec.side_file and name in side_inputs.carried(wanted)]
        # refuses side-files of another format
        manifest = check_format_version(data_path) if files else {}
        side = {}
        for spec in files:
            prefix = side_file_prefix(data_path, split, src, tgt, spec.side_file)
            side[spec.name] = read_side_file(prefix, split)
            if side[spec.name] is None:
                raise FileNotFoundError(
                    f"split '{split}': the {spec.side_file} side-file {prefix}.bin/.idx is "
                    "missing; make the data-bin with fairseq-syntax-preprocess"
                )
            # after the checks that name a damaged sentence: the file is the one recorded
            check_side_file_checksum(prefix, split, manifest)
        self.datasets[split] = SyntaxLanguagePairDataset.from_pair_dataset(
            self.datasets[split], self.fairseq_alignments, inputs=wanted, split=split, **side,
        )
        logger.info(f"[{split}] syntax inputs: {sorted(wanted) or 'none'}")

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, **kwargs):
        """fairseq's generator, or with ``--length-prior`` the length-prior beam search
        (:mod:`fairseq_syntax.generation.length_prior_generator`) on unnormalised scores."""
        if getattr(self.cfg, "length_prior", False) and seq_gen_cls is None and not getattr(args, "score_reference", False):
            from fairseq_syntax.generation.length_prior import LengthPrior
            from fairseq_syntax.generation.length_prior_generator import length_prior_generator_class

            prior = LengthPrior.from_data_dir(self.cfg.data.split(os.pathsep)[0], self.cfg.length_prior_smoothing)
            seq_gen_cls, extra = length_prior_generator_class(args, prior, self.cfg.length_prior_weight)
            args = _unnormalized(args)  # eq. 16: --length-prior implies --unnormalized
            extra_gen_cls_kwargs = {**(extra_gen_cls_kwargs or {}), **extra}
        return super().build_generator(
            models, args, seq_gen_cls=seq_gen_cls, extra_gen_cls_kwargs=extra_gen_cls_kwargs, **kwargs
        )

    # ------------------------------------------------------------------ raw input
    # fairseq-interactive: raw lines -> words -> subwords -> parse -> side tensors, in one
    # adapter (fairseq_syntax/data/raw_input.py explains the steps and the hooks).

    @property
    def inference_inputs(self):
        """The side inputs a model needs at inference: the requested model inputs."""
        return frozenset(name for name in self.requested_inputs if not SIDE_INPUTS[name].target)

    def raw_input_adapter(self):
        """The :class:`~fairseq_syntax.data.raw_input.RawInputAdapter` of this data-bin."""
        if self._raw_input is None:
            from fairseq_syntax.data.raw_input import RawInputAdapter

            self._raw_input = RawInputAdapter(
                self.cfg.data.split(os.pathsep)[0], self.source_dictionary,
                self.target_dictionary, parser=self.cfg.raw_input_parser,
                tokenization=self.cfg.raw_input_tokenizer,
            )
        return self._raw_input

    def build_bpe(self, args):
        """fairseq's ``--bpe``; a ``--sentencepiece-model`` given must be the data-bin's
        (the sha256 its manifest records)."""
        bpe = super().build_bpe(args)
        adapter = self.raw_input_adapter()
        adapter.bpe_given = bpe is not None
        model = getattr(args, "sentencepiece_model", None)
        if bpe is not None and model and adapter.manifest:
            from fairseq_syntax.data.raw_input import check_sentencepiece_model

            check_sentencepiece_model(adapter.data_dir, adapter.manifest, model)
        return bpe

    def get_interactive_tokens_and_lengths(self, lines, encode_fn):
        """Raw lines -> token ids (without ``--bpe`` the data-bin's ``spm.model`` encodes
        the words, as in preprocessing), parsed when the model needs syntax."""
        tokens = self.raw_input_adapter().prepare(lines, encode_fn, bool(self.inference_inputs))
        return tokens, [t.numel() for t in tokens]

    def build_dataset_for_inference(self, src_tokens, src_lengths, constraints=None):
        wanted = self.inference_inputs
        side = self.raw_input_adapter().side_rows(src_tokens, wanted) if wanted else {}
        return SyntaxLanguagePairDataset(
            src_tokens,
            src_lengths,
            self.source_dictionary,
            tgt_dict=self.target_dictionary,
            constraints=constraints,
            left_pad_source=False,
            inputs=wanted,
            split="inference",
            **side,
        )

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        """Adds the side tensors of the raw lines a batch holds, and collapses hard
        alignments to words."""
        adapter = self.raw_input_adapter()
        sample, sources = adapter.add_side_inputs(sample, self.inference_inputs)
        hypos = super().inference_step(generator, models, sample, prefix_tokens=prefix_tokens,
                                       constraints=constraints)
        if sources is not None:
            adapter.word_level_alignments(hypos, sources)
        return hypos


def _unnormalized(args):
    """A copy of the generation options ``args`` (DictConfig or Namespace) with ``unnormalized``."""
    args = copy.deepcopy(args)
    if isinstance(args, DictConfig):
        with open_dict(args):
            args.unnormalized = True
    else:
        args.unnormalized = True
    return args
