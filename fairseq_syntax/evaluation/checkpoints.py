"""fairseq's training config of a command line, and a trained model loaded for analysis."""

from typing import Optional

import torch


def training_config(argv):
    """The omegaconf config ``fairseq-train ARGV`` would run with (model, task, criterion,
    ... sections), parsed by fairseq's own training parser."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    import fairseq_syntax.plugin  # noqa: F401  (--user-dir skips a package already imported)

    args = options.parse_args_and_arch(options.get_training_parser(), list(argv))
    return convert_namespace_to_omegaconf(args)


def load_trained_model(path: str, data: str, split: Optional[str] = None,
                       kinds: tuple = (torch.nn.Module,), what: str = "model",
                       use_cuda: bool = False):
    """(model, cfg, task) of the checkpoint ``path`` read with the data-bin ``data``, in eval
    mode, with ``split`` loaded if given; a model that is none of the classes ``kinds`` is
    refused with ``what`` (the kind of model wanted and how to train one)."""
    from fairseq import checkpoint_utils

    import fairseq_syntax.plugin  # noqa: F401  (the task and models, safe checkpoint loading)

    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [path], arg_overrides={"data": data})
    model = models[0]
    if not isinstance(model, kinds):
        raise SystemExit(f"error: {path} holds a {type(model).__name__}, not a {what}")
    model.eval()
    if use_cuda:
        model.cuda()
    if split is not None:
        task.load_dataset(split)
    return model, cfg, task
