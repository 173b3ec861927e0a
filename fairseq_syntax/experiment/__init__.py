"""The quality experiment behind ``docs/RESULTS.md`` (``fairseq-syntax-experiment``,
:mod:`fairseq_syntax.cli.experiment`): :mod:`.methods`, :mod:`.corpora`, :mod:`.runs`,
:mod:`.records`, :mod:`.tables`; :mod:`.tools` runs the commands."""
