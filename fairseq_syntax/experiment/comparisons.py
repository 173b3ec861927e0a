"""Each method against its own backbone, per seed and test set: the paired bootstrap tests
of :mod:`fairseq_syntax.evaluation.significance` on the translations kept beside the run
records (RIBES: on the tokenised ones, against the tokenised references), cached in
``RESULTS_DIR/significance.json`` (a table renders again without the corpus's references,
and without testing again)."""
import hashlib
import json
import os
from typing import Dict, List, Optional, Tuple

from fairseq_syntax.evaluation.corpus import Corpus
from fairseq_syntax.evaluation.significance import N_SAMPLES, Delta, paired_deltas
from fairseq_syntax.syntax.text_io import read_text_lines

from .records import SIGNIFICANCE_CACHE as CACHE, read_hypotheses
from .tools import write_atomically

# (method key, test set, score) -> {seed: Delta}
Comparisons = Dict[Tuple[str, str, str], Dict[int, Delta]]


def paired_scores(corpus_name: str) -> List[str]:
    """The scores tested: BLEU and chrF, and the synthetic corpus's agreement (RIBES too,
    where the runs kept tokenised translations: :func:`compare_methods`)."""
    return ["bleu", "chrf", *(["agreement"] if corpus_name == "synthetic" else [])]


def compare_methods(by_key: Dict[str, List[dict]], backbone_of: Dict[str, str],
                    corpus_name: str, corpus: Optional[Corpus], results_dir: str,
                    tokenize: str = "13a") -> Comparisons:
    """The paired tests of every method (``backbone_of``: method key -> its backbone's key)
    against its backbone on every seed both have translations for. A test not in the
    cache runs when ``corpus`` (its references) is given, else it is left out."""
    cache_path = os.path.join(results_dir, CACHE)
    cache = json.load(open(cache_path, encoding="utf-8")) if os.path.exists(cache_path) else {}
    hyps = {}

    def translations(record: dict, tokenised: bool = False) -> Optional[dict]:
        path = record.get("path")
        if (path, tokenised) not in hyps:
            hyps[path, tokenised] = read_hypotheses(path, tokenised) if path else None
        return hyps[path, tokenised]

    def inputs(score: str, test: str, base: dict, record: dict):
        """The backbone's and the method's translations of one test (None: not kept), and
        a function that reads their references (None: no references to read)."""
        if score != "ribes":
            return (translations(base)[test], translations(record)[test],
                    lambda: corpus.references(corpus.test_set(test)))
        theirs, mine = translations(base, True), translations(record, True)
        if not theirs or not mine or test not in theirs or test not in mine:
            return None, None, None
        return theirs[test], mine[test], lambda: (
            read_text_lines(corpus.test_set(test).reference_tok, allow_empty=True)
            if corpus.test_set(test).reference_tok else None)

    out: Comparisons = {}
    added = False
    for key, backbone in backbone_of.items():
        base = {int(r["seed"]): r for r in by_key.get(backbone, [])}
        for record in by_key.get(key, []):
            seed = int(record["seed"])
            mine, theirs = translations(record), base.get(seed) and translations(base[seed])
            if not mine or not theirs:
                continue
            for test in sorted(set(mine) & set(theirs)):
                for score in [*paired_scores(corpus_name), "ribes"]:
                    base_hyps, hyps_of_key, references = inputs(score, test, base[seed], record)
                    if base_hyps is None:
                        continue
                    digest = hashlib.sha1(json.dumps(
                        [corpus_name, test, score, tokenize, N_SAMPLES, base_hyps, hyps_of_key],
                        ensure_ascii=False).encode("utf-8")).hexdigest()
                    if digest not in cache:
                        refs = corpus and references()
                        if refs is None:
                            continue
                        delta = paired_deltas(score, base_hyps, {key: hyps_of_key}, refs,
                                              tokenize)[key]
                        cache[digest] = delta.to_json()
                        added = True
                    out.setdefault((key, test, score), {})[seed] = Delta(**cache[digest])
    if added:
        write_atomically(cache_path, json.dumps(cache, indent=0, sort_keys=True) + "\n")
    return out
