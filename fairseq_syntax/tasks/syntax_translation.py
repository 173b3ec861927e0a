"""Task ``syntax_translation``: translation whose batches carry source syntax."""
import logging
import os
from dataclasses import dataclass, field

from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from fairseq_syntax.data.side_files import HEADS, TREE, read_side_file, side_file_prefix
from fairseq_syntax.data.syntax_dataset import SyntaxLanguagePairDataset

logger = logging.getLogger(__name__)

SYNTAX_INPUTS = ("heads", "distances", "tree", "alignments")


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
            "help": "compute tree-distance matrices from the heads in the collater, "
            "net_input['src_distances'] [B, S, S] (implies --load-heads; switched on when "
            "the architecture needs them)"
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
            "help": "beam search adds w * log p(len(y) | len(x)) to the score of a finished "
            "hypothesis (Eriguchi et al. 2016, eqs. 16-17), from the training length "
            "statistics in the data-bin's syntax_manifest.json, smoothed towards a Gaussian "
            "of the length ratio; added after fairseq's length normalisation, so "
            "--unnormalized gives the paper's score"
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


@register_task("syntax_translation", dataclass=SyntaxTranslationConfig)
class SyntaxTranslationTask(TranslationTask):
    """Translation whose batches carry source dependency heads, tree-distance matrices,
    binary trees and word alignments (DESIGN.md section 2).

    A side input is loaded when its option is given or when the model (built before
    the data is loaded, by fairseq-train and fairseq-generate alike) lists it in its
    ``syntax_inputs``; a model that needs none pays nothing.
    """

    cfg: SyntaxTranslationConfig

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        self.model_inputs = set()

    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        self.model_inputs |= set(getattr(model, "syntax_inputs", ()))
        return model

    def build_criterion(self, cfg, from_checkpoint=False):
        criterion = super().build_criterion(cfg, from_checkpoint)
        self.model_inputs |= set(getattr(criterion, "syntax_inputs", ()))
        return criterion

    @property
    def syntax_inputs(self):
        """The side inputs batches will carry (options plus what the model needs)."""
        wanted = set(self.model_inputs)
        for name in SYNTAX_INPUTS:
            if getattr(self.cfg, f"load_{name}", False):
                wanted.add(name)
        if "distances" in wanted:
            wanted.add("heads")
        return wanted

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        wanted = self.syntax_inputs
        if "alignments" in wanted:
            self.cfg.load_alignments = True
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        data_path = self.cfg.data.split(":")[0]
        src, tgt = self.cfg.source_lang, self.cfg.target_lang
        side = {}
        for kind, name in ((HEADS, "heads"), (TREE, "tree")):
            if name not in wanted:
                continue
            prefix = side_file_prefix(data_path, split, src, tgt, kind)
            side[name] = read_side_file(prefix)
            if side[name] is None:
                raise FileNotFoundError(
                    f"split '{split}': the {kind} side-file {prefix}.bin/.idx is missing; "
                    "make the data-bin with fairseq-syntax-preprocess"
                )
        self.datasets[split] = SyntaxLanguagePairDataset.from_pair_dataset(
            self.datasets[split],
            compute_distances="distances" in wanted,
            split=split,
            **side,
        )
        logger.info(f"[{split}] syntax inputs: {sorted(wanted) or 'none'}")

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, **kwargs):
        """fairseq's generator, or with ``--length-prior`` the length-prior beam search
        (:mod:`fairseq_syntax.modules.length_prior_generator`)."""
        if getattr(self.cfg, "length_prior", False) and seq_gen_cls is None and not getattr(args, "score_reference", False):
            from fairseq_syntax.data.length_prior import LengthPrior
            from fairseq_syntax.modules.length_prior_generator import length_prior_generator_class

            prior = LengthPrior.from_data_dir(self.cfg.data.split(os.pathsep)[0], self.cfg.length_prior_smoothing)
            seq_gen_cls, extra = length_prior_generator_class(args, prior, self.cfg.length_prior_weight)
            extra_gen_cls_kwargs = {**(extra_gen_cls_kwargs or {}), **extra}
        return super().build_generator(
            models, args, seq_gen_cls=seq_gen_cls, extra_gen_cls_kwargs=extra_gen_cls_kwargs, **kwargs
        )

    def build_dataset_for_inference(self, src_tokens, src_lengths, constraints=None):
        missing = self.syntax_inputs - {"alignments"}
        if missing:
            raise ValueError(
                f"this model needs source syntax ({', '.join(sorted(missing))}) that raw "
                "input does not carry; translate a preprocessed split with fairseq-generate"
            )
        return SyntaxLanguagePairDataset(
            src_tokens,
            src_lengths,
            self.source_dictionary,
            tgt_dict=self.target_dictionary,
            constraints=constraints,
            left_pad_source=False,
        )
