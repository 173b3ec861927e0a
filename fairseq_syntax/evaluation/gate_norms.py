"""The syntax gate of a structured-attention RNN on its own translations: ‖g_t‖₂ per target
piece, as a TSV file and as the paper's Figure 4 heatmap."""
import math
from typing import Dict, List, Tuple

import torch

from fairseq_syntax.syntax.text_io import atomic_file, atomic_text_file

from .induced_trees import batches


def gate_norms(model, task, split: str, batch_size: int, beam: int, max_len_a: float,
               max_len_b: int, use_cuda: bool) -> List[Tuple[int, str, List[str], List[float]]]:
    """Per sentence: (id, source, target pieces ending with </s>, ‖g_t‖₂ per piece)."""
    from fairseq.sequence_generator import SequenceGenerator

    from fairseq_syntax.modules.syntax_gate_attention import GATE, SyntaxGateAttentionLayer

    if not isinstance(getattr(model.decoder, "attention", None), SyntaxGateAttentionLayer):
        raise SystemExit(
            "error: this model has no syntax gate (sa_nmt_1set folds syntax into one "
            "annotation set, sa_transformer has none); the gate analysis needs "
            "sa_nmt_shared, sa_nmt, sa_nmt_hard, fa_nmt_shared or fa_nmt"
        )
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    generator = SequenceGenerator([model], tgt_dict, beam_size=beam, max_len_a=max_len_a,
                                  max_len_b=max_len_b)
    dataset = task.dataset(split)
    results: Dict[int, Tuple[int, str, List[str], List[float]]] = {}
    with torch.no_grad():
        for sample in batches(dataset, batch_size, use_cuda):
            hypos = generator.generate([model], sample)
            targets = [h[0]["tokens"] for h in hypos]
            length = max(len(t) for t in targets)
            prev = targets[0].new_full((len(targets), length), tgt_dict.pad())
            for row, target in enumerate(targets):
                prev[row, 0] = tgt_dict.eos()
                prev[row, 1:len(target)] = target[:-1]
            net = sample["net_input"]
            _, extra = model(net["src_tokens"], net["src_lengths"], prev)
            norms = extra[GATE][0].float().norm(dim=-1).cpu()  # [B, T]
            for row, index in enumerate(sample["id"].tolist()):
                target = targets[row].cpu()
                src = net["src_tokens"][row].cpu()
                source = src_dict.string(src[src.ne(src_dict.pad())], "sentencepiece")
                pieces = [tgt_dict[int(t)] for t in target]
                results[index] = (index, source, pieces, norms[row, :len(target)].tolist())
    return [results[i] for i in sorted(results)]


def write_gates(path: str, sentences) -> None:
    with atomic_text_file(path) as out:
        for index, source, pieces, norms in sentences:
            out.write(f"# id = {index}\n# source = {source}\n")
            out.write(f"# hypothesis = {' '.join(pieces[:-1])}\n")
            for piece, norm in zip(pieces, norms):
                out.write(f"{piece}\t{norm:.4f}\n")
            out.write("\n")


MAX_DRAWN_PIECES = 60


def draw_gates(path: str, sentences, title: str, dpi: int = 100) -> Tuple[int, int]:
    """Figure 4 of the paper: each sentence a row of its target pieces, shaded by the gate
    norm (darker: more syntax); pieces past the first :data:`MAX_DRAWN_PIECES` of a
    sentence are left out. Returns the PNG's size in pixels."""
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not sentences:
        raise SystemExit("error: no sentence to draw")
    sentences = [(i, s, p[:MAX_DRAWN_PIECES], n[:MAX_DRAWN_PIECES]) for i, s, p, n in sentences]
    length = max(len(p) for _, _, p, _ in sentences)
    longest = max(len(piece) for _, _, p, _ in sentences for piece in p)
    cell_w = max(0.5, 0.09 * longest + 0.2)
    width = math.ceil((1.2 + cell_w * length + 1.0) * 4) / 4
    height = math.ceil((0.9 + 0.45 * len(sentences)) * 4) / 4
    data = np.full((len(sentences), length), np.nan)
    for row, (_, _, _, norms) in enumerate(sentences):
        data[row, :len(norms)] = norms
    masked = np.ma.masked_invalid(data)
    fig = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(fig)
    ax = fig.add_axes([0.9 / width, 0.3 / height, cell_w * length / width,
                       0.45 * len(sentences) / height])
    low, high = float(np.nanmin(data)), float(np.nanmax(data))
    image = ax.imshow(masked, cmap="Greys", vmin=low, vmax=high if high > low else low + 1e-6,
                      aspect="auto", interpolation="nearest")
    middle = (low + high) / 2
    for row, (_, _, pieces, norms) in enumerate(sentences):
        for col, (piece, norm) in enumerate(zip(pieces, norms)):
            ax.text(col, row, piece, ha="center", va="center", fontsize=7,
                    color="white" if norm > middle else "black")
    ax.set_xticks([])
    ax.set_yticks(range(len(sentences)))
    ax.set_yticklabels([f"{index}" for index, _, _, _ in sentences], fontsize=8)
    ax.set_ylabel("sentence")
    ax.set_title(title, fontsize=9)
    cax = fig.add_axes([(0.9 + cell_w * length + 0.25) / width, 0.3 / height, 0.15 / width,
                        0.45 * len(sentences) / height])
    fig.colorbar(image, cax=cax, label="‖g‖₂")
    with atomic_file(path, binary=True) as f:  # a killed run leaves no half a picture
        fig.savefig(f, dpi=dpi, format="png")
    return int(width * dpi), int(height * dpi)
