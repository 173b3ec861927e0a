"""The evaluation layer: what the experiment, parity and benchmark commands compute, as
library code that takes paths and values (``docs/design.md``, "Import layering").

* :mod:`.corpus`: a corpus described once (languages, test sets, references, detokeniser,
  sacreBLEU tokenizer, extra scores); presets ``synthetic``, ``multi30k``, ``kftt``.
* :mod:`.significance`: paired bootstrap resampling of a method against its backbone
  through sacreBLEU's ``PairedTest``, and the mean difference over seeds.
* :mod:`.agreement`: the synthetic corpus's agreement accuracy as a sacreBLEU metric.
* :mod:`.figures`: learning curves and difference charts (matplotlib).
"""
