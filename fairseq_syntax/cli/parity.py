"""``fairseq-syntax-parity``: does the backbone learn as fast as fairseq's own ``lstm``?

Trains ``attentional_rnn`` (``--task syntax_translation``) and fairseq's ``lstm``
(``--task translation --encoder-bidirectional``, ``--decoder-out-embed-dim`` = the
embedding size) side by side on one data-bin with the same sizes, optimiser, batches,
seed and budget, one thread each, then decodes the test split(s) of both with beam 5.
Prints a [progress] line per model while both train
(:mod:`fairseq_syntax.experiment.progress`), then the valid perplexity after every epoch,
training words/s (fairseq's ``train_wps``, mean over epochs) and BLEU / chrF, and writes
them to ``WORKDIR/parity.json``. Run again in the same WORKDIR, a model whose training
command is unchanged is kept (decoded again, or resumed from its ``checkpoint_last.pt`` if
it was killed) and one whose command changed is trained afresh.

Example (the setting of the README's table)::

    fairseq-syntax-parity --corpus multi30k --data-bin data/multi30k/data-bin \\
        --workdir work/parity --epochs 3
"""
import argparse
import sys
from typing import Optional, Sequence

from fairseq_syntax.experiment.parity import markdown, parity


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fairseq-syntax-parity", description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", required=True, metavar="NAME|FILE",
                   help="multi30k, kftt: --data-bin of examples/CORPUS/prepare.sh (BLEU and chrF "
                   "on its detokenised test sets); synthetic: generated in WORKDIR or "
                   "--data-bin/--raw (BLEU and agreement on test and gen); or a corpus "
                   "description FILE (see fairseq-syntax-experiment)")
    p.add_argument("--workdir", required=True, help="checkpoints, logs, outputs, parity.json")
    p.add_argument("--data-bin", help="the data-bin (required for multi30k)")
    p.add_argument("--raw", help="synthetic: the folder fairseq-syntax-synthetic wrote")
    p.add_argument("--corpus-dir", help="multi30k, kftt: prepare.sh's --dest (default: the "
                   "parent of --data-bin)")
    p.add_argument("--epochs", type=int, default=3, help="training epochs (default: 3)")
    p.add_argument("--updates", type=int, default=None, help="also stop after this many updates")
    p.add_argument("--seed", type=int, default=1, help="training seed (default: 1)")
    p.add_argument("--embed-dim", type=int, default=256, help="embedding sizes (default: 256)")
    p.add_argument("--encoder-hidden", type=int, default=256,
                   help="encoder LSTM size per direction (default: 256)")
    p.add_argument("--decoder-hidden", type=int, default=512, help="decoder LSTM size (default: 512)")
    p.add_argument("--dropout", type=float, default=0.3, help="dropout (default: 0.3)")
    p.add_argument("--lr", type=float, default=0.002, help="Adam learning rate (default: 0.002)")
    p.add_argument("--clip-norm", type=float, default=5.0, help="gradient clipping (default: 5)")
    p.add_argument("--label-smoothing", type=float, default=0.1, help="(default: 0.1)")
    p.add_argument("--max-tokens", type=int, default=4000, help="tokens per batch (default: 4000)")
    p.add_argument("--backbone-args", default="",
                   help="more fairseq-train options for the backbone only, e.g. "
                   "'--init-uniform 0' (PyTorch's default initialisation)")
    p.add_argument("--no-decode", action="store_true",
                   help="train only: valid ppl and words/s, no BLEU")
    p.add_argument("--gpu", action="store_true", help="train and decode on the GPU")
    # what prepare_synthetic reads when it generates the corpus
    for name, value in dict(train_size=20000, valid_size=500, test_size=500, gen_size=500,
                            corpus_seed=1, vocab_size=1000).items():
        p.add_argument("--" + name.replace("_", "-"), type=int, default=value,
                       help=f"synthetic corpus generated in WORKDIR (default: {value})")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = get_parser().parse_args(argv)
    if args.corpus in ("multi30k", "kftt") and not args.data_bin:
        get_parser().error(f"--corpus {args.corpus} needs --data-bin")
    print(markdown(parity(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
