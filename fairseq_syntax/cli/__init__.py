"""Small console commands of the plugin that fairseq's own command lines do not cover
(each module has a ``main(argv=None)``, installed as a ``fairseq-syntax-*`` console script)."""


def training_config(argv):
    """The omegaconf config ``fairseq-train ARGV`` would run with (model, task, criterion,
    ... sections), parsed by fairseq's own training parser."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    args = options.parse_args_and_arch(options.get_training_parser(), list(argv))
    return convert_namespace_to_omegaconf(args)
