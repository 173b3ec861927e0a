"""Each method against its own backbone, per seed and test set, and each backbone's seeds
against each other: the paired bootstrap tests of :mod:`fairseq_syntax.evaluation.significance`
on the translations kept beside the run records (RIBES: on the tokenised ones, against the
tokenised references), cached in ``RESULTS_DIR/significance.json`` (a table renders again
without the corpus's references, and without testing again). Runs scored against other
references than each other, or than the corpus holds now, are never compared:
:func:`check_references`."""
import hashlib
import json
import os
from typing import Dict, List, Optional, Sequence, Tuple

import sacrebleu

from fairseq_syntax.evaluation.corpus import Corpus
from fairseq_syntax.evaluation.host import same_cpu
from fairseq_syntax.evaluation.significance import N_SAMPLES, Delta, paired_deltas
from fairseq_syntax.syntax.text_io import read_json

from .methods import BACKBONE, TRANSFORMER_BACKBONE, family_of
from .records import SIGNIFICANCE_CACHE as CACHE, read_hypotheses
from .tools import write_atomically

# (method key, test set, score) -> {seed: Delta}
Comparisons = Dict[Tuple[str, str, str], Dict[int, Delta]]
# (method key, test set, score) -> {(earlier seed, later seed): Delta of later − earlier}
SeedPairs = Dict[Tuple[str, str, str], Dict[Tuple[int, int], Delta]]


def recorded_tokenize(records: Sequence[dict]) -> str:
    """sacreBLEU's tokenizer named in the records' BLEU signatures (``tok:ja-mecab-0.996-IPA``
    -> ``ja-mecab``): the runs' own, for a rendering without the corpus; ``13a`` if none."""
    for record in records:
        tok = dict(part.split(":", 1) for part in
                   record["scores"].get("bleu_signature", "").split("|") if ":" in part).get("tok")
        names = [n for n in sacrebleu.BLEU.TOKENIZERS if tok == n or str(tok).startswith(n + "-")]
        if names:
            return max(names, key=len)
    return "13a"


def paired_scores(corpus_name: str) -> List[str]:
    """The scores tested: BLEU and chrF, and the synthetic corpus's agreement (RIBES too,
    where the runs kept tokenised translations: :func:`compare_methods`)."""
    return ["bleu", "chrf", *(["agreement"] if corpus_name == "synthetic" else [])]


class ReferencesChanged(Exception):
    """Records of one table were scored against other references (:func:`check_references`)."""


def references_of(record: dict, test: str) -> Optional[str]:
    """The sha256 of the references ``record``'s scores of ``test`` compared with
    (``Corpus.references_sha256``); None in records older than 2026-12-05, which kept none."""
    return (record["scores"].get("references_sha256") or {}).get(test)


def check_references(records: Sequence[dict], corpus: Optional[Corpus]) -> None:
    """Raise :class:`ReferencesChanged` where two records were scored against other
    references of one test set, or a record against other references than ``corpus`` (where
    given) holds now: their scores, means and paired tests would mix two references."""
    now: Dict[str, str] = {}
    first: Dict[str, Tuple[dict, str]] = {}
    for record in records:
        for test, digest in (record["scores"].get("references_sha256") or {}).items():
            name = f"{record.get('method')} seed {record.get('seed')}"
            if corpus is not None and any(t.name == test for t in corpus.test_sets):
                if test not in now:
                    now[test] = corpus.references_sha256(corpus.test_set(test))
                if digest != now[test]:
                    t = corpus.test_set(test)
                    raise ReferencesChanged(
                        f"the record of {name} was scored against other references of test "
                        f"set {test} than {t.reference}"
                        f"{' and ' + t.reference_tok if t.reference_tok else ''} hold now "
                        f"(sha256 {digest[:12]}…, now {now[test][:12]}…)")
            seen = first.setdefault(test, (record, digest))
            if seen[1] != digest:
                raise ReferencesChanged(
                    f"the records of {seen[0].get('method')} seed {seen[0].get('seed')} and "
                    f"{name} were scored against other references of test set {test} "
                    f"(sha256 {seen[1][:12]}… and {digest[:12]}…)")


class PairedTests:
    """The paired tests of one run's translations against another's, on every test set and
    score both have, read from and added to the cache. A test not in the cache runs when
    ``corpus`` (its references) is given, else it is left out and its pair of runs named in
    ``untested``."""

    def __init__(self, corpus_name: str, corpus: Optional[Corpus], results_dir: str,
                 tokenize: str = "13a"):
        self.corpus_name, self.corpus, self.tokenize = corpus_name, corpus, tokenize
        self.cache_path = os.path.join(results_dir, CACHE)
        self.cache = read_json(self.cache_path, missing={})
        self.hyps: dict = {}
        self.added = False
        self.untested: List[str] = []  # "METHOD seed N − METHOD seed M", in the order met

    def translations(self, record: dict, tokenised: bool = False) -> Optional[dict]:
        path = record.get("path")
        if (path, tokenised) not in self.hyps:
            self.hyps[path, tokenised] = read_hypotheses(path, tokenised) if path else None
        return self.hyps[path, tokenised]

    def inputs(self, score: str, test: str, base: dict, record: dict):
        """The base run's and the other run's translations of one test (None: not kept), and
        a function that reads their references (None: no references to read)."""
        corpus = self.corpus
        if score != "ribes":
            return (self.translations(base)[test], self.translations(record)[test],
                    lambda: corpus.references(corpus.test_set(test)))
        theirs, mine = self.translations(base, True), self.translations(record, True)
        if not theirs or not mine or test not in theirs or test not in mine:
            return None, None, None
        return theirs[test], mine[test], lambda: corpus.references_tok(corpus.test_set(test))

    def of(self, base: dict, record: dict) -> Dict[Tuple[str, str], Delta]:
        """(test set, score) -> Δ of ``record``'s translations against ``base``'s."""
        mine, theirs = self.translations(record), self.translations(base)
        out: Dict[Tuple[str, str], Delta] = {}
        if not mine or not theirs:
            return out
        for test in sorted(set(mine) & set(theirs)):
            for score in [*paired_scores(self.corpus_name), "ribes"]:
                base_hyps, hyps, references = self.inputs(score, test, base, record)
                if base_hyps is None:
                    continue
                # the references' sha256 where either record kept it (check_references: one)
                refs_sha256 = sorted({d for d in (references_of(base, test),
                                                  references_of(record, test)) if d})
                digest = hashlib.sha1(json.dumps(
                    [self.corpus_name, test, score, self.tokenize, N_SAMPLES, base_hyps, hyps,
                     *refs_sha256], ensure_ascii=False).encode("utf-8")).hexdigest()
                if digest not in self.cache:
                    if self.corpus is None:
                        pair = (f"{record.get('method')} seed {record.get('seed')} − "
                                f"{base.get('method')} seed {base.get('seed')}")
                        if pair not in self.untested:
                            self.untested.append(pair)
                        continue
                    refs = references()
                    if refs is None:
                        continue
                    delta = paired_deltas(score, base_hyps, {"run": hyps}, refs,
                                          self.tokenize)["run"]
                    self.cache[digest] = delta.to_json()
                    self.added = True
                out[test, score] = Delta(**self.cache[digest])
        return out

    def save(self) -> None:
        if self.added:
            write_atomically(self.cache_path,
                             json.dumps(self.cache, indent=0, sort_keys=True) + "\n")
            self.added = False


def backbones_of(by_key: Dict[str, List[dict]]) -> Dict[str, str]:
    """Each method with records -> its family's backbone (the backbones themselves left out)."""
    out = {}
    for key in by_key:
        backbone = TRANSFORMER_BACKBONE if family_of(key) == "transformer" else BACKBONE
        if key != backbone:
            out[key] = backbone
    return out


def method_backbone_pairs(by_key: Dict[str, List[dict]], backbone_of: Dict[str, str]):
    """(method key, seed, the backbone's record, the method's record) for every seed that a
    method (``backbone_of``: method key -> its backbone's key) and its backbone both ran."""
    for key, backbone in backbone_of.items():
        base = {int(r["seed"]): r for r in by_key.get(backbone, [])}
        for record in by_key.get(key, []):
            seed = int(record["seed"])
            if seed in base:
                yield key, seed, base[seed], record


def cpu_pairings(by_key: Dict[str, List[dict]]) -> Dict[str, Dict[int, Optional[bool]]]:
    """Method key -> seed -> whether the method's run and its backbone's run of that seed
    ran on one kind of machine (:func:`~fairseq_syntax.evaluation.host.same_cpu`; None: not
    known): a paired test across two CPUs also tests the CPUs."""
    out: Dict[str, Dict[int, Optional[bool]]] = {}
    for key, seed, base, record in method_backbone_pairs(by_key, backbones_of(by_key)):
        out.setdefault(key, {})[seed] = same_cpu(record.get("host") or {},
                                                 base.get("host") or {})
    return out


def compare_methods(by_key: Dict[str, List[dict]], backbone_of: Dict[str, str],
                    tests: PairedTests) -> Comparisons:
    """The paired tests of every method (``backbone_of``: method key -> its backbone's key)
    against its backbone on every seed both have translations for."""
    out: Comparisons = {}
    for key, seed, base, record in method_backbone_pairs(by_key, backbone_of):
        for (test, score), delta in tests.of(base, record).items():
            out.setdefault((key, test, score), {})[seed] = delta
    return out


def compare_seeds(by_key: Dict[str, List[dict]], keys: Sequence[str], tests: PairedTests
                  ) -> SeedPairs:
    """Each pair of seeds of each method of ``keys`` (the backbones) tested as a method
    against its backbone: two runs of one model differ only by training noise, so a
    significant pair is a false alarm of the one-seed test."""
    out: SeedPairs = {}
    for key in keys:
        runs = sorted(by_key.get(key, []), key=lambda r: int(r["seed"]))
        for i, earlier in enumerate(runs):
            for later in runs[i + 1:]:
                pair = (int(earlier["seed"]), int(later["seed"]))
                for (test, score), delta in tests.of(earlier, later).items():
                    out.setdefault((key, test, score), {})[pair] = delta
    return out
