"""Pictures of an experiment (matplotlib, PNG, no timestamp in the file): learning
curves over seeds and the differences from the backbone with their 95 % intervals."""
import textwrap
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from fairseq_syntax.syntax.text_io import atomic_file


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def learning_curves(path: str, title: str, curves: Dict[str, Sequence[Sequence[float]]],
                    ylabel: str = "valid ppl") -> None:
    """One line per method: the mean over its seeds after each epoch, and a band from the
    lowest to the highest seed (``curves``: method -> one list of values per seed)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, runs in curves.items():
        epochs = max(len(r) for r in runs)
        values = [[r[e] for r in runs if len(r) > e] for e in range(epochs)]
        x = np.arange(1, epochs + 1)
        mean = np.array([np.mean(v) for v in values])
        line, = ax.plot(x, mean, marker=".", label=f"{label} ({len(runs)})")
        if len(runs) > 1:
            ax.fill_between(x, [min(v) for v in values], [max(v) for v in values],
                            color=line.get_color(), alpha=0.15)
    ax.set_yscale("log")
    ax.set_xlabel("epoch")
    ax.set_ylabel(ylabel + " (log scale)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, title="method (seeds)", title_fontsize=7)
    fig.tight_layout()
    with atomic_file(path, binary=True) as f:  # a killed run leaves no half a picture
        fig.savefig(f, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)


def delta_chart(path: str, title: str,
                rows: List[Tuple[str, float, Optional[float], Optional[float], bool]],
                xlabel: str = "Δ BLEU against the backbone") -> None:
    """One bar per method: its Δ and 95 % interval (``rows``: label, Δ, low, high,
    significant); significant ones in a strong colour, the others grey."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 1.5 + 0.38 * max(1, len(rows))))  # title, axis, rows
    for y, (label, delta, low, high, significant) in enumerate(reversed(rows)):
        color = "tab:blue" if significant else "tab:gray"
        err = None if low is None else [[delta - low], [high - delta]]
        ax.errorbar(delta, y, xerr=err, fmt="o", color=color, capsize=3)
    ax.axvline(0.0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r[0] for r in reversed(rows)], fontsize=8)
    ax.set_xlabel(xlabel)
    # over the whole figure, not the axes beside the method labels, so a long title is not cut
    fig.suptitle(textwrap.fill(title, 90), fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    with atomic_file(path, binary=True) as f:  # a killed run leaves no half a picture
        fig.savefig(f, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)
