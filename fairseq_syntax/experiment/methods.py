"""The methods of the experiment (one training run each), the per-corpus sizes, budgets and
Transformer recipes, and the names of their record files."""
import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from fairseq_syntax.evaluation.architectures import (
    BACKBONE, FAIRSEQ_LSTM, FAIRSEQ_TRANSFORMER, TRANSFORMER_BACKBONE, rnn_architectures,
    transformer_architectures,
)

FAIRSEQ_TRANSFORMER_PEER = "fairseq_transformer"  # fairseq's own transformer
TREE_INDUCING = ("sa_nmt", "fa_nmt", "sa_transformer")  # arch prefixes whose encoders induce trees
# arch prefixes with a position predictor (eq. 5): local-p and SDAtt, both families
POSITION_PREDICTING = ("sdatt_local_p", "sdatt_syntax", "sdatt_double_local_p",
                       "sdatt_double_syntax", "sdatt_transformer", "sdatt_double_transformer")
DEFAULT_RESULTS = os.path.join("docs", "RESULTS.md")
RECORD_FORMAT = "fairseq-syntax-experiment run, version 2"  # 2: scores per test set
RUN_STAMP = "run.json"  # in a run's folder: the training command its checkpoints belong to
DECODED_CHECKPOINT = "checkpoint_best.pt"  # the epoch of lowest validation loss
AVERAGED_CHECKPOINT = "checkpoint_average.pt"  # a recipe's average_last epochs, averaged
USER_DIR_SHELL = '"$(fairseq-syntax-user-dir)"'  # how a reader's shell finds the plugin

# Per-corpus defaults of the sizes and the budget (CPU-friendly for synthetic; Multi30k as
# issue 14's anchor: 256-d embeddings, BiLSTM 2 x 256, decoder 512, 12 epochs).
DEFAULTS = {
    # the quickstart's sizes; 2400 updates: the backbone's lowest valid loss is then within
    # about 2 % of smoothed_loss_floor, below which no longer run can go (800 were not
    # enough: seed 2 had 1.41 at 800, 1.13 at 2130; docs/RESULTS.md, Budgets)
    "synthetic": dict(updates=2400, epochs=None, max_tokens=3000, embed_dim=96,
                      encoder_hidden=128, decoder_hidden=256, dropout=0.1, lr=0.003,
                      clip_norm=1.0, label_smoothing=0.1, step_time_batches=0),
    "multi30k": dict(updates=None, epochs=12, max_tokens=4000, embed_dim=256,
                     encoder_hidden=256, decoder_hidden=512, dropout=0.3, lr=0.002,
                     clip_norm=5.0, label_smoothing=0.1, step_time_batches=8),
    # KFTT (issue 41 item 5): Multi30k's sizes and about 2 hours of one CPU core, on the
    # 20,000-pair sample of examples/kftt/README.md ("The CPU subset": 17,472 pairs after
    # the length filter, sentencepiece 8,000, 190 updates of 4000 tokens an epoch): 16
    # epochs, 3,040 updates at 2.2-2.6 s each. In 3,300 updates train-100k had 4.7 epochs
    # and a 40,000-pair sample 9.5, and the backbone's valid ppl was still falling 28 % and
    # 3-6 % an epoch. Another KFTT data-bin: give --updates or --epochs.
    "kftt": dict(updates=None, epochs=16, max_tokens=4000, embed_dim=256,
                 encoder_hidden=256, decoder_hidden=512, dropout=0.3, lr=0.002,
                 clip_norm=5.0, label_smoothing=0.1, step_time_batches=8),
}
DEFAULT_METHODS = {
    "synthetic": ",".join([
        "attentional_rnn", "attentional_rnn+supervised_attention",
        "sdatt_double_syntax", "sa_nmt_shared", "sa_nmt_hard", "tree2seq",
        "lookahead_concat"]),
    # issue 39 item 4: the backbones and each paper's headline variant (look-ahead: the
    # Enc-Dec pattern, the paper's best)
    "multi30k": ",".join([
        "attentional_rnn", "lstm", "sdatt_double_syntax", "lookahead_enc_dec",
        "sa_nmt_shared", "tree2seq", "attentional_rnn+supervised_attention"]),
    # issue 41 item 5
    "kftt": ",".join([
        "attentional_rnn", "tree2seq", "tree2seq+length_prior", "sdatt_double_syntax",
        "attentional_rnn+supervised_attention", "sa_nmt_shared", "lookahead_enc_dec"]),
}
# The Transformer family's recipe per corpus (issue 17 item 5), declared once: sizes,
# optimiser, schedule and budget of every Transformer method, each size given on the command
# line to the model's base architecture (so fairseq's transformer_align gets the same model).
# Adam (0.9, 0.98), inverse_sqrt warm-up, label smoothing 0.1, weight decay 1e-4 and a shared
# decoder input/output embedding are fairseq's IWSLT'14 Transformer recipe
# (examples/translation/README.md). --transformer-recipe KEY=VALUE overrides a value;
# --updates/--epochs, when given, are every method's budget. lr_scheduler: "inverse_sqrt"
# (fairseq's, after the warm-up) or "linear" (after the warm-up, down to 0 at the last of
# ``updates``: fairseq's polynomial_decay of power 1); average_last: decode the average of
# the last N epochs' checkpoints (fairseq's scripts/average_checkpoints.py; fairseq saves
# one at the end of each epoch, so a budget that stops inside an epoch leaves that part
# out), 0: the checkpoint of lowest validation loss; normalize_before: layer norm before each
# sublayer (pre-norm, fairseq's --encoder/--decoder-normalize-before; Nguyen & Salazar 2019,
# "Transformers without Tears", found it better in low-resource translation) instead of
# after it (post-norm, the original Transformer's and fairseq's default).
TRANSFORMER_RECIPES = {
    # comparable with the RNN's quickstart sizes (1.10M parameters in all): 2 + 2 layers of
    # 128, FFN 512, 4 heads (0.95M); the RNN's 2400 updates of 3000 tokens, warm-up over the
    # first 400, peak lr 1e-3 (fairseq's upper value; the model is small).
    "synthetic": dict(updates=2400, epochs=None, max_tokens=3000, embed_dim=128, ffn_dim=512,
                      layers=2, heads=4, dropout=0.1, attention_dropout=0.0, lr=0.001,
                      warmup_updates=400, adam_betas="(0.9, 0.98)", weight_decay=0.0001,
                      clip_norm=0.0, label_smoothing=0.1, alignment_heads=1,
                      lr_scheduler="inverse_sqrt", average_last=0, normalize_before=False),
    # the RNN's CPU budget: fairseq-syntax-step-time on the Multi30k data-bin (1 thread, the
    # same 6 batches of 4000 tokens) gave the RNN recipe 1.29 s per update, the
    # transformer_iwslt_de_en sizes (6 + 6 layers of 512, FFN 1024) 5.95 s (the RNN's 12
    # epochs = 1812 updates buy 393 of them, 2.6 epochs), 3 + 3 layers of 512 3.17 s, and
    # 3 + 3 layers of 256, FFN 1024, 4 heads 1.50 s: 12 x 1.29 / 1.50 = 10.3, so 10 epochs of
    # the same batches (4000 tokens), ~1510 updates. In so few updates peak lr 2e-3 and
    # dropout 0.1 learn fastest of those tried (syntax_transformer, seed 1, valid ppl after
    # epoch 4 / 10, BLEU): lr 1e-3 dropout 0.3 - / 5.75, 34.37; lr 2e-3 dropout 0.3 9.22 / -;
    # lr 2e-3 dropout 0.1 7.79 / 4.80, 36.83. Batches of 2000 tokens learn faster per epoch
    # (valid ppl 26.55 / 10.98 / 7.49 / 6.20 after epochs 1-4, the RNN 28.31 / 11.52 / 7.76 /
    # 6.54) but end no better: 9 epochs (as much wall time as the RNN's 12 or less) 4.83, BLEU
    # 36.05; warm-up over 800 updates was slower (6.95 after epoch 4); records in
    # docs/results/multi30k-transformer-2000-tokens. Those 10 epochs are 1510 updates, the
    # budget here, so that the learning rate can decay linearly to 0 at the last one: the
    # inverse-sqrt decay (the recipe's schedule until 2026-11-26, peak 2e-3; records in
    # docs/results/multi30k-transformer-inverse-sqrt) still held half its peak there and
    # ended at valid ppl 4.80, BLEU 36.83; linear at peak 2e-3 4.74, at 3e-3 4.56, BLEU 38.59
    # (the RNN backbone's 12 epochs: 4.52, 38.39; docs/RESULTS.md, the schedule paragraph).
    "multi30k": dict(updates=1510, epochs=None, max_tokens=4000, embed_dim=256, ffn_dim=1024,
                     layers=3, heads=4, dropout=0.1, attention_dropout=0.0, lr=0.003,
                     warmup_updates=400, adam_betas="(0.9, 0.98)", weight_decay=0.0001,
                     clip_norm=0.0, label_smoothing=0.1, alignment_heads=1,
                     lr_scheduler="linear", average_last=0, normalize_before=False),
}
# KFTT: the RNN's 3,040 updates (on the 20,000-pair KFTT data-bin a Transformer update cost
# about an RNN one, one core each, 2026-11-28) of a smaller, pre-norm model: Multi30k's
# 3 + 3 post-norm layers did not learn KFTT (syntax_transformer seed 1: valid ppl lowest
# 64.60, BLEU 0.43; records in docs/results/kftt-en-ja-transformer-post-norm); of the
# trials in docs/RESULTS.md ("KFTT Transformer recipe"), 2 + 2 pre-norm layers, FFN 512,
# dropout 0.2, attention dropout 0.1 learned best and flattened (valid ppl 39.43 at
# epoch 10, 38.56 at 15, 38.65 at 16; test BLEU 6.04; the RNN backbone: 29.94, 8.21).
TRANSFORMER_RECIPES["kftt"] = dict(TRANSFORMER_RECIPES["multi30k"], updates=3040, layers=2,
                                   ffn_dim=512, dropout=0.2, attention_dropout=0.1,
                                   normalize_before=True)
# Recipe keys added after records were written, with the value those records were trained
# with (a record without the key is read with it).
RECIPE_KEYS_ADDED = dict(lr_scheduler="inverse_sqrt", average_last=0, normalize_before=False)
LR_SCHEDULERS = ("inverse_sqrt", "linear")
# beam search of every decode (the test splits and the decode-only variants)
DECODING = ["--beam", "5", "--batch-size", "64", "--max-len-a", "1.5", "--max-len-b", "10",
            "--post-process", "sentencepiece"]


@dataclass
class Method:
    """One training run: ``key`` names it on the command line and in the table."""

    key: str
    arch: str
    criterion: str = "label_smoothed_cross_entropy"
    # model options of this method (e.g. a reading of a paper's equation)
    model_args: List[str] = field(default_factory=list)
    # decode-only variants sharing this run's checkpoint: (key, extra generate args)
    variants: List[tuple] = field(default_factory=list)
    # whose recipe trains it: "rnn" (the size options of this command) or "transformer"
    # (TRANSFORMER_RECIPES, given to the model's base architecture)
    family: str = "rnn"
    task: str = "syntax_translation"  # of fairseq-train and fairseq-generate
    # Transformer: supervise (and print) the recipe's alignment head (--alignment-layer/
    # --alignment-heads, as fairseq's transformer_align picks one)
    alignment_head: bool = False
    train_args: List[str] = field(default_factory=list)  # other fairseq-train options


@dataclass
class Row:
    """Measured scores of one run of one method (None: not measured): ``tests`` holds each
    test set's scores by name (bleu, chrf, and ribes, bleu_tok, agreement,
    agreement_long where the corpus asks for them); accuracies, BLEU, chrF, RIBES, AER,
    P, R, DA, UA in %. ``hypotheses``: each test set's detokenised translations, and
    ``hypotheses_tok`` its tokenised ones where RIBES is scored (written beside the record,
    for the paired tests)."""

    key: str
    arch: str
    seed: int = 1
    tests: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    hypotheses: Dict[str, List[str]] = field(default_factory=dict)
    hypotheses_tok: Dict[str, List[str]] = field(default_factory=dict)
    bleu_signature: str = ""
    chrf_signature: str = ""
    ribes_signature: str = ""  # RIBES on the recipe's words (evaluation/translation_scores.py)
    # each test set's Corpus.references_sha256: the references its scores compared with
    # (recorded since 2026-12-05)
    references_sha256: Dict[str, str] = field(default_factory=dict)
    aer: Optional[float] = None
    precision: Optional[float] = None
    recall: Optional[float] = None
    da: Optional[float] = None
    ua: Optional[float] = None
    baselines: Dict[str, float] = field(default_factory=dict)
    valid_ppl: Optional[float] = None  # of the decoded (lowest valid loss) checkpoint
    valid_loss: Optional[float] = None  # lowest validation loss of training (bits/token)
    valid_loss_floor: Optional[float] = None  # :func:`smoothed_loss_floor` of this run
    step_time_ratio: Optional[float] = None
    # where the position predictors put p_i on the first test set (evaluation/positions.py):
    # position_at_eos, position_at_first, position_at_last (% of target steps; at_last since
    # 2026-11-28), position_mean_relative, position_sd_relative, position_target_correlation
    positions: Dict[str, float] = field(default_factory=dict)
    train_epochs: Optional[int] = None
    train_updates: Optional[int] = None
    train_seconds: Optional[float] = None
    valid_ppl_by_epoch: List[float] = field(default_factory=list)  # epochs 1, 2, ...
    decoded_epoch: Optional[int] = None  # epoch of the decoded checkpoint (None: an average)
    training_cpus: List[dict] = field(default_factory=list)  # the record's host["training_cpus"]
    error: str = ""


def all_methods() -> List[Method]:
    """Every architecture on the RNN backbone (the sizes and budgets here are the RNN's),
    backbone first, and the criterion and option variants; then the Transformer family
    (:func:`transformer_methods`)."""
    methods = [Method(a, a) for a in rnn_architectures()]
    for m in methods:
        if m.arch == "tree2seq":
            m.variants.append(("tree2seq+length_prior", ["--length-prior"]))
    methods[1:1] = [
        # fairseq's own lstm, the backbone's peer (issue 14): same sizes, batches and budget
        Method(FAIRSEQ_LSTM, FAIRSEQ_LSTM, task="translation"),
        Method(f"{BACKBONE}+supervised_attention", BACKBONE, "supervised_attention_cross_entropy"),
        Method(f"{BACKBONE}+blackout", BACKBONE, "blackout"),
    ]
    # SDAtt's default reads the Gaussian on the normalised weights; eq. 10 as written puts
    # it on the scores (issue 15): its own row
    at = next(i for i, m in enumerate(methods) if m.key == "sdatt_double_syntax") + 1
    methods.insert(at, Method("sdatt_double_syntax+gaussian_scores", "sdatt_double_syntax",
                              model_args=["--syntax-gaussian", "scores"]))
    # the distance row M[p_i] read between consecutive words, so that p_i is pulled between
    # two pieces of one word too (docs/RESULTS.md, notes: KFTT's predictor)
    methods.insert(at + 1, Method("sdatt_double_syntax+row_words", "sdatt_double_syntax",
                                  model_args=["--syntax-row", "words"]))
    return methods + transformer_methods()


def transformer_methods() -> List[Method]:
    """The Transformer family (issue 17) under its recipe: every mechanism's architecture at
    the recipe's sizes (``architectures.transformer_architectures``, backbone first), the backbone
    under ``supervised_attention_cross_entropy`` (Mi et al. on the recipe's alignment head)
    and, to compare with it, fairseq's own ``transformer_align`` under
    ``label_smoothed_cross_entropy_with_alignment`` (``--task translation --load-alignments``:
    fairseq reads the data-bin's ``{split}.align.{src}-{tgt}`` binaries; the same head).
    fairseq's own ``transformer`` (``--task translation``) is the backbone's peer, as ``lstm``
    is the RNN backbone's: same sizes, recipe, batches and budget. SDAtt runs twice: every
    cross-attention head syntax-directed (the architectures' default), and one head per layer
    (``+one_head``, ``--sdatt-heads 1``)."""
    methods = [Method(a, a, family="transformer") for a in transformer_architectures()]
    for arch in ("sdatt_double_transformer", "sdatt_transformer"):  # a chosen set of heads:
        at = next(i for i, m in enumerate(methods) if m.key == arch) + 1  # one per layer
        methods.insert(at, Method(f"{arch}+one_head", arch, family="transformer",
                                  model_args=["--sdatt-heads", "1"]))
    methods[1:1] = [
        Method(FAIRSEQ_TRANSFORMER_PEER, FAIRSEQ_TRANSFORMER, family="transformer", task="translation"),
        Method(f"{TRANSFORMER_BACKBONE}+supervised_attention", TRANSFORMER_BACKBONE,
               "supervised_attention_cross_entropy", family="transformer", alignment_head=True),
        Method("transformer_align", "transformer_align",
               "label_smoothed_cross_entropy_with_alignment", family="transformer",
               task="translation", alignment_head=True, train_args=["--load-alignments"]),
    ]
    return methods


def family_of(key: str) -> str:
    """``rnn`` or ``transformer``: the family of the method (or variant) ``key``."""
    return next((m.family for m in all_methods() if key in method_keys([m])), "rnn")


def subset_validated(methods: Sequence[Method]) -> set:
    """Keys of the ``--task translation`` methods (and variants): fairseq 0.12's own dataset
    validates them without a last batch whose size is not a multiple of 8 (fairseq #5036)."""
    return {k for m in methods if m.task == "translation" for k in method_keys([m])}


def method_keys(methods: Sequence[Method]) -> List[str]:
    """The table's keys of ``methods``: each method, then its decode-only variants."""
    return [k for m in methods for k in [m.key, *(v[0] for v in m.variants)]]


def select_methods(spec: str) -> List[Method]:
    """``all`` or comma-separated method keys (``tree2seq+length_prior`` needs ``tree2seq``);
    ``transformer`` stands for every method of the Transformer family."""
    methods = all_methods()
    if spec == "all":
        return methods
    wanted = [s.strip() for s in spec.split(",") if s.strip()]
    if "transformer" in wanted:
        at = wanted.index("transformer")
        wanted[at:at + 1] = [k for k in method_keys(transformer_methods()) if k not in wanted]
    known = set(method_keys(methods))
    unknown = [w for w in wanted if w not in known]
    if unknown:
        raise SystemExit(f"fairseq-syntax-experiment: error: unknown methods {unknown}; "
                         f"known: {', '.join(sorted(known))}")
    chosen = []
    for m in methods:
        variants = [v for v in m.variants if v[0] in wanted]
        if m.key in wanted or variants:
            m.variants = variants
            chosen.append(m)
    return chosen


def file_key(key: str) -> str:
    """``key`` as a file name part: every run of non-word characters as ``_``."""
    return re.sub(r"\W+", "_", key)


def record_path(results_dir: str, key: str, seed: int) -> str:
    return os.path.join(results_dir, f"{file_key(key)}.seed{seed}.json")
