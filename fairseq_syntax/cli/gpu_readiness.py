"""``fairseq-syntax-gpu-readiness``: every architecture's training tokens/s in float32,
``--fp16`` and ``--bf16`` against its backbone (and the backbones against fairseq's own
``lstm``/``transformer``) on the same batches, peak GPU memory, and whether the data loader
at ``--num-workers`` keeps up with the training step; a Markdown table naming the device.

The measurement is :mod:`fairseq_syntax.evaluation.readiness` (built on
``fairseq-syntax-step-time``'s runs). On a CPU, ``--fp16`` is skipped with a note and
``--bf16`` runs where torch has bfloat16 CPU kernels. Example (one GPU, the recipe's sizes,
bounded to 7 minutes of measurement): ``fairseq-syntax-gpu-readiness data/kftt-en-ja/data-bin
--time-budget 420 --out readiness.md``; a test-sized run: ``--preset tiny --cpu``.
"""
import argparse
import os
import shlex
import sys

from fairseq_syntax.evaluation.readiness import PRECISIONS, PRESETS
from fairseq_syntax.syntax.text_io import atomic_text_file


def get_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("data_bin", metavar="DATA_BIN", help="a data-bin made by fairseq-syntax-preprocess "
                   "(its train split is timed)")
    p.add_argument("--preset", choices=sorted(PRESETS), default="recipe",
                   help="model sizes: 'recipe' (RNNs at the Multi30k/KFTT recipe's sizes, "
                   "Transformers at _iwslt_de_en's, 4000 tokens per batch) or 'tiny' (for tests)")
    p.add_argument("--rnn-args", help="fairseq-train size options of the RNN family instead of the preset's")
    p.add_argument("--transformer-args", help="fairseq-train size options of the Transformer "
                   "family instead of the preset's")
    p.add_argument("--archs", help="comma-separated architectures to measure (their references "
                   "are added); default: every architecture of the plugin")
    p.add_argument("--precisions", default=",".join(PRECISIONS),
                   help="comma-separated, of fp32, fp16 (fairseq's --fp16), bf16 (--bf16)")
    p.add_argument("--steps", type=int, default=10, help="timed training steps per run and precision")
    p.add_argument("--warmup", type=int, help="untimed steps per run and precision first, through "
                   "the timed batches (default: --steps, each timed batch once, so that no run "
                   "pays a batch shape's GPU kernel set-up while timed)")
    p.add_argument("--max-tokens", type=int, help="tokens per batch (default: the preset's)")
    p.add_argument("--loader-batches", type=int, default=50,
                   help="batches drawn from each run's data loader to time it")
    p.add_argument("--num-workers", type=int, default=1,
                   help="data loader worker processes (fairseq-train's default is 1)")
    p.add_argument("--cpu", action="store_true", help="run on the CPU even when CUDA is there")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (on the CPU)")
    p.add_argument("--seed", type=int, default=1, help="seed of the batch choice and the models")
    p.add_argument("--time-budget", type=float, metavar="SECONDS",
                   help="skip (with a note) a precision that would end past this many seconds, "
                   "and loaders past it, so that a bounded call still prints a table")
    p.add_argument("--out", metavar="FILE", help="also write the Markdown table to FILE")
    return p


def main(argv=None):
    args = get_parser().parse_args(argv)
    if not os.path.isdir(args.data_bin) or not any(
            f.startswith("dict.") for f in os.listdir(args.data_bin)):
        raise SystemExit(f"error: {args.data_bin} is not a data-bin (no dict.*.txt): make one with "
                         "fairseq-syntax-preprocess")
    if args.steps < 1 or (args.warmup or 0) < 0 or args.loader_batches < 1:
        raise SystemExit("error: --steps and --loader-batches must be at least 1, --warmup at least 0")
    import torch

    from fairseq_syntax.evaluation.readiness import markdown, measure_readiness, preset_sizes, readiness_runs

    device = "cpu"
    if not args.cpu:
        if torch.cuda.is_available():
            device = "cuda"
        else:
            print("no CUDA device: measuring on the CPU (give --cpu to say so)", file=sys.stderr)
    torch.set_num_threads(args.threads)
    sizes = preset_sizes(args.preset)
    try:
        runs = readiness_runs(shlex.split(args.rnn_args or sizes["rnn"]),
                              shlex.split(args.transformer_args or sizes["transformer"]),
                              args.archs.split(",") if args.archs else None)
        result = measure_readiness(
            args.data_bin, runs, [p for p in args.precisions.split(",") if p], args.steps,
            args.warmup, args.max_tokens or sizes["max_tokens"], device, args.loader_batches,
            args.num_workers, args.seed,
            progress=lambda message: print(message, file=sys.stderr, flush=True),
            time_budget_s=args.time_budget)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}")
    command = "fairseq-syntax-gpu-readiness " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    table = markdown(result, command)
    print(table)
    if args.out:
        with atomic_text_file(args.out) as f:
            f.write(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
