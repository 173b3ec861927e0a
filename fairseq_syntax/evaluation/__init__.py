"""The evaluation layer: what the experiment, parity and benchmark commands compute, as
library code that takes paths and values (``docs/design.md``, "Import layering").

* :mod:`.corpus`: a corpus described once (languages, test sets, references, detokeniser,
  sacreBLEU tokenizer, extra scores); presets ``synthetic``, ``multi30k``, ``kftt``.
* :mod:`.significance`: paired bootstrap resampling of a method against its backbone
  through sacreBLEU's ``PairedTest``, and the mean difference over seeds.
* :mod:`.agreement`: the synthetic corpus's main-verb agreement (overall, long-distance)
  and as a sacreBLEU metric.
* :mod:`.figures`: learning curves and difference charts (matplotlib).
* :mod:`.architectures`: the architecture lists, backbones and fairseq's own peers.
* :mod:`.fairseq_commands`: the one builder of ``fairseq-train`` command lines.
* :mod:`.fairseq_log`: fairseq-train's JSON log, read once.
* :mod:`.alignments`: AER, precision and recall of attention or Pharaoh links.
* :mod:`.induced_trees`, :mod:`.gate_norms`: the trees a structured-attention checkpoint
  induces and their scores; its syntax gate per target piece.
* :mod:`.step_time`, :mod:`.throughput`: step time on the same batches; training and
  decoding speed, memory and data loading against the backbone.
* :mod:`.checkpoints`: fairseq's training config of a command line, a trained model loaded.
"""
