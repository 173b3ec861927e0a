"""The quality experiment behind ``docs/RESULTS.md`` (``fairseq-syntax-experiment``,
:mod:`fairseq_syntax.cli.experiment`): :mod:`.methods`, :mod:`.corpora`, :mod:`.commands`
(command lines and settings of a run), :mod:`.runs` (train, resume, decode),
:mod:`.scoring`, :mod:`.records`, :mod:`.tables`, :mod:`.comparisons`; :mod:`.tools` runs
the commands; :mod:`.parity` is ``fairseq-syntax-parity``'s side-by-side run."""
