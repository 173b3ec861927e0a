"""The one builder of ``fairseq-train`` and of ``fairseq-generate`` command lines
(experiment, parity, benchmark) and the RNN backbone's size options."""
from typing import List, Sequence

from fairseq_syntax.user_dir import user_dir


def rnn_size_args(embed_dim, encoder_hidden, decoder_hidden, dropout) -> List[str]:
    """Embedding, encoder (per direction) and decoder sizes and dropout of the RNN family."""
    e = str(embed_dim)
    return ["--encoder-embed-dim", e, "--decoder-embed-dim", e,
            "--encoder-hidden-size", str(encoder_hidden),
            "--decoder-hidden-size", str(decoder_hidden), "--dropout", str(dropout)]


def fairseq_train_command(databin: str, options: Sequence[str], save: str, seed: int,
                          log_file: str, log_interval: int, workers: bool = True,
                          checkpoints: Sequence[str] = ("--no-epoch-checkpoints",),
                          after: Sequence[str] = ()) -> List[str]:
    """``fairseq-train DATABIN --user-dir PLUGIN OPTIONS --seed SEED [--num-workers 0]
    --save-dir SAVE CHECKPOINTS --no-progress-bar``, fairseq's JSON log to ``log_file``
    every ``log_interval`` updates, then ``after``."""
    return ["fairseq-train", databin, "--user-dir", user_dir(), *options, "--seed", str(seed),
            *(["--num-workers", "0"] if workers else []), "--save-dir", save, *checkpoints,
            "--no-progress-bar", "--log-format", "json", "--log-file", log_file,
            "--log-interval", str(log_interval), *after]


def fairseq_generate_command(databin: str, task_options: Sequence[str], checkpoint: str,
                             subset: str, options: Sequence[str]) -> List[str]:
    """``fairseq-generate DATABIN --user-dir PLUGIN TASK_OPTIONS --path CHECKPOINT
    --gen-subset SUBSET OPTIONS``: the plugin's user dir for every task, so that torch's safe
    loader reads fairseq's own checkpoints too."""
    return ["fairseq-generate", databin, "--user-dir", user_dir(), *task_options,
            "--path", checkpoint, "--gen-subset", subset, *options]
