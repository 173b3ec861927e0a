"""``fairseq-syntax-lookahead-heatmap``: draw a decoded sentence's look-ahead attention.

Loads a ``look_ahead_rnn`` checkpoint (any ``lookahead_*`` architecture), translates one
sentence of a data-bin split with beam search, force-decodes the best hypothesis (or,
with ``--reference``, the reference) step by step, and draws the look-ahead weights as a
heatmap like Figure 5 of Zhou et al.: one row per target token ``y_j`` (the token the
step predicts), one column per previous target token ``y_i``, ``i < j``; the first row
is blank, there is no past at the first step. ``--weights-out`` also writes the weights
and tokens as JSON.

    fairseq-syntax-lookahead-heatmap DATA-BIN --path checkpoints/checkpoint_best.pt \\
        --gen-subset test --index 3 --out fig.png
"""
import argparse
import json
import logging
import math
import sys
from typing import List, Optional, Sequence, Tuple

import torch

import fairseq_syntax.plugin  # noqa: F401  (registers the task and models, allows safe checkpoint loading)
from fairseq_syntax.syntax.text_io import atomic_file, atomic_text_file


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fairseq-syntax-lookahead-heatmap",
        description="Decode one sentence with a look-ahead attention model (lookahead_concat, "
        "lookahead_enc_dec, lookahead_dec_enc) and draw its look-ahead attention weights "
        "(target tokens x previous target tokens) as a PNG heatmap.",
    )
    parser.add_argument("data", metavar="DATA-BIN",
                        help="the data-bin folder (dictionaries and the split to read)")
    parser.add_argument("--path", required=True, metavar="CKPT",
                        help="checkpoint of a look_ahead_rnn model")
    parser.add_argument("--gen-subset", default="test", metavar="SPLIT",
                        help="data-bin split to read the sentence from (default: test)")
    parser.add_argument("--index", type=int, default=0,
                        help="the sentence's index in the split, the id fairseq-generate prints "
                        "as S-<id> (default: 0)")
    parser.add_argument("--out", required=True, metavar="PNG", help="the PNG file to write")
    parser.add_argument("--weights-out", metavar="JSON", default=None,
                        help="also write the tokens and the weight matrix as JSON")
    parser.add_argument("--reference", action="store_true",
                        help="force-decode the reference translation instead of the model's "
                        "beam-search hypothesis")
    parser.add_argument("--beam", type=int, default=5, help="beam size of the decoding (default: 5)")
    parser.add_argument("--max-len-b", type=int, default=200,
                        help="maximum hypothesis length in tokens (default: 200)")
    parser.add_argument("--dpi", type=int, default=100, help="resolution of the PNG (default: 100)")
    parser.add_argument("--cell-inches", type=float, default=0.35,
                        help="side of one heatmap cell in inches; the figure size follows from "
                        "it and the label lengths (default: 0.35)")
    parser.add_argument("--max-inches", type=float, default=30.0,
                        help="upper bound of the automatic figure's width and height in inches; "
                        "cells shrink to fit long sentences (default: 30)")
    parser.add_argument("--figsize", type=float, nargs=2, metavar=("W", "H"), default=None,
                        help="figure width and height in inches, instead of the automatic size")
    parser.add_argument("--cpu", action="store_true", help="run on the CPU even if CUDA is available")
    return parser


def load(args):
    """The model, the task, and the sentence's sample (a batch of one)."""
    from fairseq import utils

    from fairseq_syntax.evaluation.checkpoints import load_trained_model
    from fairseq_syntax.models.look_ahead_rnn import LookAheadRNNModel

    use_cuda = torch.cuda.is_available() and not args.cpu
    model, _cfg, task = load_trained_model(
        args.path, args.data, args.gen_subset, (LookAheadRNNModel,),
        "look_ahead_rnn model (train with --arch lookahead_concat, lookahead_enc_dec or "
        "lookahead_dec_enc)", use_cuda)
    dataset = task.dataset(args.gen_subset)
    if not 0 <= args.index < len(dataset):
        raise SystemExit(
            f"error: --index {args.index} is out of range: split '{args.gen_subset}' has "
            f"{len(dataset)} sentences"
        )
    sample = dataset.collater([dataset[args.index]])
    if use_cuda:
        sample = utils.move_to_cuda(sample)
    return model, task, sample


def decode(model, task, sample, beam: int, max_len_b: int) -> torch.Tensor:
    """The best beam-search hypothesis, ending with eos."""
    from fairseq.sequence_generator import SequenceGenerator

    generator = SequenceGenerator([model], task.target_dictionary, beam_size=beam, max_len_b=max_len_b)
    with torch.no_grad():
        hypos = generator.generate([model], sample)
    return hypos[0][0]["tokens"]


def look_ahead_matrix(model, sample, target: torch.Tensor) -> torch.Tensor:
    """Weights ``[T, T-1]`` of the force-decoded ``target`` (ending with eos): row ``j``
    predicts ``target[j]`` and attends over the steps that produced ``target[:j]``."""
    eos = model.decoder.dictionary.eos()
    prev = torch.cat([target.new_tensor([eos]), target[:-1]]).unsqueeze(0)
    net_input = sample["net_input"]
    weights = model.look_ahead_attention(net_input["src_tokens"], net_input["src_lengths"], prev)
    return weights[0, :, :-1].cpu()


CHAR_INCHES = 0.075  # about one character of an 8 pt label
RIGHT_INCHES = 1.1  # colour bar
TOP_INCHES = 0.6  # title


def margins(rows: Sequence[str], cols: Sequence[str]) -> Tuple[float, float]:
    """Left and bottom margins in inches, room for the tick labels."""
    return 0.3 + CHAR_INCHES * max(map(len, rows)), 0.3 + CHAR_INCHES * max(map(len, cols))


def figure_size(rows: Sequence[str], cols: Sequence[str], cell: float,
                max_inches: float) -> Tuple[float, float, float]:
    """``(width, height, cell)`` in inches: the sides rounded up to quarter inches (so that
    inches x dpi is exact), the cell shrunk so that neither side exceeds ``max_inches``."""
    left, bottom = margins(rows, cols)
    fit_w = (max_inches - left - RIGHT_INCHES) / len(cols)
    fit_h = (max_inches - bottom - TOP_INCHES) / len(rows)
    cell = max(min(cell, fit_w, fit_h), 0.01)
    width = left + cell * len(cols) + RIGHT_INCHES
    height = bottom + cell * len(rows) + TOP_INCHES
    return math.ceil(width * 4) / 4, math.ceil(height * 4) / 4, cell


def draw(weights: torch.Tensor, rows: List[str], cols: List[str], out: str, title: str,
         figsize: Tuple[float, float], dpi: int, cell: float) -> Tuple[int, int]:
    """Draw the heatmap with matplotlib's Agg canvas; return the PNG's (width, height) in pixels."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    width, height = figsize
    fig = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(fig)
    data = weights.numpy()
    # cells at or after the current step have no weight: leave them blank, as in the paper
    future = np.triu(np.ones_like(data, dtype=bool), k=0)
    masked = np.ma.masked_array(data, mask=future)
    left, bottom = margins(rows, cols)
    left, bottom = left / width, bottom / height
    ax_w = max(min(cell * len(cols) / width, 1 - left - RIGHT_INCHES / width), 0.05)
    ax_h = max(min(cell * len(rows) / height, 1 - bottom - TOP_INCHES / height), 0.05)
    ax = fig.add_axes([left, bottom, ax_w, ax_h])
    image = ax.imshow(masked, cmap="Greys", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(len(cols)))
    ax.set_xticklabels(cols, rotation=90, fontsize=8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(rows, fontsize=8)
    ax.set_xlabel("previous target tokens")
    ax.set_ylabel("target tokens")
    ax.set_title(title, fontsize=9)
    cax = fig.add_axes([left + ax_w + 0.25 / width, bottom, 0.15 / width, ax_h])
    fig.colorbar(image, cax=cax)
    with atomic_file(out, binary=True) as f:  # a killed run leaves no half a picture
        fig.savefig(f, dpi=dpi, format="png")
    # Agg's canvas is int(inches * dpi) pixels on each side
    return int(width * dpi), int(height * dpi)


def main(argv: Optional[Sequence[str]] = None):
    args = get_parser().parse_args(argv)
    if min(args.dpi, args.cell_inches, args.max_inches, *(args.figsize or [1])) <= 0:
        raise SystemExit("error: --dpi, --cell-inches, --max-inches and --figsize must be positive")
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    model, task, sample = load(args)
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    if args.reference:
        target = sample["target"][0]
        target = target[target.ne(tgt_dict.pad())]
    else:
        target = decode(model, task, sample, args.beam, args.max_len_b)
    if target.numel() < 2:
        raise SystemExit(f"error: sentence {args.index} decodes to eos only; nothing to draw")
    weights = look_ahead_matrix(model, sample, target)
    tokens = [tgt_dict[int(t)] for t in target]
    rows, cols = tokens, tokens[:-1]
    source = src_dict.string(sample["net_input"]["src_tokens"][0])
    forced = "reference" if args.reference else f"beam-{args.beam} hypothesis"
    print(f"S-{args.index}\t{source}")
    print(f"{'T' if args.reference else 'H'}-{args.index}\t{' '.join(tokens[:-1])}")
    if args.figsize:
        figsize, cell = tuple(args.figsize), args.cell_inches
    else:
        width, height, cell = figure_size(rows, cols, args.cell_inches, args.max_inches)
        figsize = (width, height)
    title = f"look-ahead attention, {args.gen_subset} sentence {args.index} ({forced})"
    width_px, height_px = draw(weights, rows, cols, args.out, title, figsize, args.dpi, cell)
    print(f"wrote {args.out}: {width_px} x {height_px} pixels "
          f"({figsize[0]:g} x {figsize[1]:g} in at {args.dpi} dpi)")
    if args.weights_out:
        with atomic_text_file(args.weights_out) as f:
            json.dump({
                "split": args.gen_subset, "index": args.index, "forced": forced,
                "source": source.split(), "target": rows, "previous": cols,
                # weights[j][i]: step j (predicting target[j]) on previous token i < j
                "weights": [[round(float(w), 6) for w in row[:j]] for j, row in enumerate(weights)],
            }, f, ensure_ascii=False, indent=1)
        print(f"wrote {args.weights_out}")


if __name__ == "__main__":
    main(sys.argv[1:])
