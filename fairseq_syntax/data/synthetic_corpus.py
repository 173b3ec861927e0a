"""An embedded, syntax-sensitive synthetic parallel corpus (English -> ``vf``).

The corpus is generated in the package (nothing to download) and comes with gold
source dependency trees (CoNLL-U) and gold word alignments (Pharaoh), so the
syntax- and alignment-aware models of this plugin can be trained and checked on a
task where syntax provably matters.

Source language (``en``)
    An English fragment from a small grammar: ``S -> NP V NP "."``, where a noun phrase
    is ``Det Adj* N`` optionally followed by *one* modifier, either a prepositional
    phrase (``near the cats``) or a subject relative clause (``that chased the bird``),
    whose noun phrases may again carry a modifier, up to :data:`MAX_DEPTH` levels.
    Because each noun takes at most one modifier, every sentence has exactly one
    parse. Verbs are in the past tense (``saw``, ``chased``), so **the English verb
    form carries no number**: "the dog saw" and "the dogs saw" share their verb.

Target language (``vf``, "verb-final")
    An invented language with its own word forms (a fixed lexicon maps each English
    lemma to an invented stem). Its order is SOV: ``subject-NP object-NP verb "."``;
    relative clauses are verb-final too (``REL object-NP verb``), adjectives precede
    the noun, modifiers (PPs, relative clauses) follow it, and adpositions are
    postpositions (``NP pres`` = "near NP"). Determiners and nouns mark number
    (``ko vask`` "the dog", ``kos vaski`` "the dogs") and **every verb agrees in number
    with its own subject**: the main verb with the head noun of the main subject, a
    relative-clause verb with the noun the clause modifies (``vid-et`` singular,
    ``vid-en`` plural).

Why it is syntax-sensitive
    To choose the target verb form, a model has to find the head noun of the verb's
    subject in the source, and the source verb does not help. Between that noun and
    the verb stand PPs and relative clauses whose nouns usually have the *other*
    number (attractors, see :data:`P_ATTRACTOR`), and in the target the whole object
    noun phrase stands between the subject and the verb as well. A model that copies
    the number of the closest noun gets agreement wrong; one that follows the tree
    (``nsubj`` of the root, ``acl:relcl`` to the modified noun) gets it right.
    :func:`agreement_accuracy` measures this on the main verb.

Files (per split ``S`` in train/valid/test, see :func:`generate_corpus`):
``S.en``, ``S.vf`` (one whitespace-tokenised sentence per line), ``S.en.conllu`` (gold
UD-style trees, one per line of ``S.en``) and ``S.align`` (Pharaoh ``i-j``, 0-based,
source index ``i``, target index ``j``; the alignment is one-to-one).

Pure Python (standard library only): no torch, no fairseq.
"""
import argparse
import os
import random
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple, Union

SG, PL = "sg", "pl"
NUMBERS = (SG, PL)

# ----------------------------------------------------------------------------------
# Lexicon
# ----------------------------------------------------------------------------------

#: nouns: English singular, English plural, vf stem (vf plural = stem + "i")
NOUNS: List[Tuple[str, str, str]] = [
    ("dog", "dogs", "vask"), ("cat", "cats", "mirn"), ("bird", "birds", "pilk"),
    ("horse", "horses", "dorv"), ("cow", "cows", "gomb"), ("mouse", "mice", "sirt"),
    ("fox", "foxes", "fulk"), ("wolf", "wolves", "vorg"), ("bear", "bears", "brund"),
    ("rabbit", "rabbits", "lapp"), ("lion", "lions", "lemb"), ("tiger", "tigers", "tagr"),
    ("farmer", "farmers", "korp"), ("teacher", "teachers", "lerd"),
    ("child", "children", "kint"), ("doctor", "doctors", "medr"), ("king", "kings", "rost"),
    ("queen", "queens", "kwill"), ("student", "students", "stold"),
    ("artist", "artists", "palt"), ("sailor", "sailors", "nork"), ("baker", "bakers", "brad"),
    ("girl", "girls", "tamp"), ("boy", "boys", "jork"), ("man", "men", "varn"),
    ("woman", "women", "fenn"), ("friend", "friends", "amik"),
    ("neighbor", "neighbors", "besk"), ("pilot", "pilots", "flig"),
    ("monkey", "monkeys", "simm"),
]
VF_NOUN_PLURAL = "i"

#: verbs: English lemma, English past tense (number-neutral), vf stem
VERBS: List[Tuple[str, str, str]] = [
    ("see", "saw", "vid"), ("chase", "chased", "kas"), ("like", "liked", "pam"),
    ("follow", "followed", "seg"), ("watch", "watched", "wak"), ("find", "found", "fund"),
    ("hear", "heard", "aud"), ("help", "helped", "halp"), ("visit", "visited", "vis"),
    ("greet", "greeted", "grus"), ("admire", "admired", "mir"), ("fear", "feared", "tim"),
    ("push", "pushed", "pus"), ("call", "called", "vok"), ("know", "knew", "sab"),
    ("meet", "met", "tref"),
]
#: vf verb suffix per number of the verb's subject
VF_VERB_SUFFIX = {SG: "et", PL: "en"}

#: adjectives: English, vf (invariable)
ADJECTIVES: List[Tuple[str, str]] = [
    ("big", "gran"), ("small", "pik"), ("old", "sen"), ("young", "jun"), ("happy", "fel"),
    ("angry", "ira"), ("brown", "bron"), ("white", "alb"), ("clever", "sag"),
    ("lazy", "pig"), ("tall", "alt"), ("quiet", "kwe"),
]

#: prepositions: English preposition, vf postposition
PREPOSITIONS: List[Tuple[str, str]] = [
    ("near", "pres"), ("behind", "dor"), ("with", "kon"), ("beside", "lat"),
    ("under", "sot"), ("above", "sup"),
]

#: determiners by definiteness and number: (English form, vf form)
DETERMINERS = {
    ("def", SG): ("the", "ko"), ("def", PL): ("the", "kos"),
    ("indef", SG): ("a", "mi"), ("indef", PL): ("some", "mis"),
}
RELATIVE_PRONOUN = ("that", "ke")
PUNCT = (".", ".")

# ----------------------------------------------------------------------------------
# Generation parameters
# ----------------------------------------------------------------------------------

MAX_DEPTH = 2  #: noun phrases nested deeper than this take no modifier
P_SUBJECT_MODIFIER = 0.75  #: the main subject has a PP / relative clause
P_OBJECT_MODIFIER = 0.35  #: the main object has a PP / relative clause
P_NESTED_MODIFIER = 0.3  #: an embedded noun phrase has a modifier
P_RELATIVE = 0.5  #: a modifier is a relative clause (else a PP)
P_ATTRACTOR = 0.75  #: a noun inside the subject has the other number than its head
P_DEFINITE = 0.6
ADJECTIVE_COUNT_WEIGHTS = (0.6, 0.3, 0.1)  #: weights for 0, 1, 2 adjectives


def _vf_noun(stem: str, number: str) -> str:
    return stem + (VF_NOUN_PLURAL if number == PL else "")


def _vf_verb(stem: str, number: str) -> str:
    return stem + VF_VERB_SUFFIX[number]


def _build_verb_forms() -> Dict[str, str]:
    return {_vf_verb(stem, n): n for _, _, stem in VERBS for n in NUMBERS}


def _build_source_noun_forms() -> Dict[str, str]:
    forms = {}
    for sg, pl, _ in NOUNS:
        forms[sg], forms[pl] = SG, PL
    return forms


_VF_VERB_NUMBER = _build_verb_forms()
_EN_NOUN_NUMBER = _build_source_noun_forms()


def target_lexicon() -> Dict[str, Tuple[str, str, Optional[str]]]:
    """Every vf word form -> (UPOS, English lemma, number or None).

    Raises ``ValueError`` if two entries share a form (the lexicon must be
    unambiguous so that :func:`verb_number` can identify verb forms).
    """
    entries: List[Tuple[str, Tuple[str, str, Optional[str]]]] = []
    for sg, _, stem in NOUNS:
        entries += [(_vf_noun(stem, n), ("NOUN", sg, n)) for n in NUMBERS]
    for lemma, _, stem in VERBS:
        entries += [(_vf_verb(stem, n), ("VERB", lemma, n)) for n in NUMBERS]
    entries += [(vf, ("ADJ", en, None)) for en, vf in ADJECTIVES]
    entries += [(vf, ("ADP", en, None)) for en, vf in PREPOSITIONS]
    entries += [(vf, ("DET", en, n)) for (_, n), (en, vf) in DETERMINERS.items()]
    entries += [(RELATIVE_PRONOUN[1], ("PRON", "that", None)), (PUNCT[1], ("PUNCT", ".", None))]
    lexicon: Dict[str, Tuple[str, str, Optional[str]]] = {}
    for form, entry in entries:
        if form in lexicon:
            raise ValueError(f"ambiguous vf form {form!r}: {lexicon[form]} and {entry}")
        lexicon[form] = entry
    return lexicon


def verb_number(token: str) -> Optional[str]:
    """The number (``"sg"``/``"pl"``) of a vf verb form, ``None`` if not a verb form."""
    return _VF_VERB_NUMBER.get(token.lower())


def source_noun_number(token: str) -> Optional[str]:
    """The number of an English noun form (``dog`` -> sg, ``mice`` -> pl), else ``None``."""
    return _EN_NOUN_NUMBER.get(token.lower())


# ----------------------------------------------------------------------------------
# Phrase structure
# ----------------------------------------------------------------------------------


@dataclass(eq=False)
class Word:
    """One source word with its translation (the corpus is aligned one-to-one)."""

    en: str
    vf: str
    upos: str
    lemma: str
    feats: str = "_"
    deprel: str = ""
    head: Optional["Word"] = None  # None for the root


@dataclass
class NounPhrase:
    det: Word
    adjectives: List[Word]
    noun: Word
    number: str
    modifier: Optional[Union["PrepPhrase", "RelClause"]] = None


@dataclass
class PrepPhrase:
    prep: Word
    np: NounPhrase


@dataclass
class RelClause:
    rel: Word
    verb: Word
    obj: NounPhrase


@dataclass
class Sentence:
    subject: NounPhrase
    verb: Word
    obj: NounPhrase
    punct: Word


@dataclass
class SyntheticPair:
    """One sentence pair with its gold source tree and gold alignment."""

    source: List[str]
    target: List[str]
    heads: List[int]  #: 0-based head of each source word, -1 for the root
    deprels: List[str]
    alignment: List[Tuple[int, int]]  #: (source index, target index), 0-based
    main_verb_number: str  #: "sg" / "pl": the number of the main subject head noun
    upos: List[str] = field(default_factory=list)
    lemmas: List[str] = field(default_factory=list)
    feats: List[str] = field(default_factory=list)


def _attach(word: Word, head: Optional[Word], deprel: str) -> Word:
    word.head, word.deprel = head, deprel
    return word


class _Generator:
    """Samples sentences from the grammar with its own ``random.Random``."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def number(self, attract_from: Optional[str]) -> str:
        """A noun's number; inside the subject usually the other one (an attractor)."""
        if attract_from is None:
            return self.rng.choice(NUMBERS)
        other = PL if attract_from == SG else SG
        return other if self.rng.random() < P_ATTRACTOR else attract_from

    def noun_phrase(self, number: str, depth: int, p_modifier: float,
                    attract_from: Optional[str]) -> NounPhrase:
        """``Det Adj* N [modifier]``; the caller attaches the head noun."""
        sg, pl, stem = self.rng.choice(NOUNS)
        noun = Word(pl if number == PL else sg, _vf_noun(stem, number), "NOUN", sg,
                    "Number=Sing" if number == SG else "Number=Plur")
        definiteness = "def" if self.rng.random() < P_DEFINITE else "indef"
        en_det, vf_det = DETERMINERS[(definiteness, number)]
        det = _attach(Word(en_det, vf_det, "DET", en_det), noun, "det")
        n_adj = self.rng.choices(range(len(ADJECTIVE_COUNT_WEIGHTS)), ADJECTIVE_COUNT_WEIGHTS)[0]
        adjectives = [_attach(Word(en, vf, "ADJ", en), noun, "amod")
                      for en, vf in self.rng.sample(ADJECTIVES, n_adj)]
        np = NounPhrase(det, adjectives, noun, number)
        if depth < MAX_DEPTH and self.rng.random() < p_modifier:
            np.modifier = self.modifier(np, depth + 1, attract_from)
        return np

    def embedded_np(self, depth: int, attract_from: Optional[str]) -> NounPhrase:
        return self.noun_phrase(self.number(attract_from), depth, P_NESTED_MODIFIER, attract_from)

    def modifier(self, head: NounPhrase, depth: int,
                 attract_from: Optional[str]) -> Union[PrepPhrase, RelClause]:
        """A PP (``near the cats``) or subject relative clause modifying ``head``."""
        if self.rng.random() < P_RELATIVE:
            lemma, past, stem = self.rng.choice(VERBS)
            verb = _attach(Word(past, _vf_verb(stem, head.number), "VERB", lemma,
                                "Mood=Ind|Tense=Past|VerbForm=Fin"), head.noun, "acl:relcl")
            rel = _attach(Word(*RELATIVE_PRONOUN, "PRON", "that", "PronType=Rel"), verb, "nsubj")
            obj = self.embedded_np(depth, attract_from)
            _attach(obj.noun, verb, "obj")
            return RelClause(rel, verb, obj)
        en, vf = self.rng.choice(PREPOSITIONS)
        np = self.embedded_np(depth, attract_from)
        prep = _attach(Word(en, vf, "ADP", en), np.noun, "case")
        _attach(np.noun, head.noun, "nmod")
        return PrepPhrase(prep, np)

    def sentence(self) -> Sentence:
        number = self.rng.choice(NUMBERS)
        lemma, past, stem = self.rng.choice(VERBS)
        verb = _attach(Word(past, _vf_verb(stem, number), "VERB", lemma,
                            "Mood=Ind|Tense=Past|VerbForm=Fin"), None, "root")
        subject = self.noun_phrase(number, 0, P_SUBJECT_MODIFIER, attract_from=number)
        obj = self.noun_phrase(self.number(None), 0, P_OBJECT_MODIFIER, attract_from=None)
        _attach(subject.noun, verb, "nsubj")
        _attach(obj.noun, verb, "obj")
        punct = _attach(Word(*PUNCT, "PUNCT", "."), verb, "punct")
        return Sentence(subject, verb, obj, punct)


# ----------------------------------------------------------------------------------
# Linearisation
# ----------------------------------------------------------------------------------


def _en_np(np: NounPhrase) -> List[Word]:
    words = [np.det, *np.adjectives, np.noun]
    if isinstance(np.modifier, PrepPhrase):
        words += [np.modifier.prep, *_en_np(np.modifier.np)]
    elif isinstance(np.modifier, RelClause):
        words += [np.modifier.rel, np.modifier.verb, *_en_np(np.modifier.obj)]
    return words


def _vf_np(np: NounPhrase) -> List[Word]:
    words = [np.det, *np.adjectives, np.noun]
    if isinstance(np.modifier, PrepPhrase):
        words += [*_vf_np(np.modifier.np), np.modifier.prep]
    elif isinstance(np.modifier, RelClause):
        words += [np.modifier.rel, *_vf_np(np.modifier.obj), np.modifier.verb]
    return words


def _to_pair(sentence: Sentence) -> SyntheticPair:
    src = [*_en_np(sentence.subject), sentence.verb, *_en_np(sentence.obj), sentence.punct]
    tgt = [*_vf_np(sentence.subject), *_vf_np(sentence.obj), sentence.verb, sentence.punct]
    src_index = {id(w): i for i, w in enumerate(src)}
    tgt_index = {id(w): j for j, w in enumerate(tgt)}
    return SyntheticPair(
        source=[w.en for w in src],
        target=[w.vf for w in tgt],
        heads=[-1 if w.head is None else src_index[id(w.head)] for w in src],
        deprels=[w.deprel for w in src],
        alignment=[(i, tgt_index[id(w)]) for i, w in enumerate(src)],
        main_verb_number=sentence.subject.number,
        upos=[w.upos for w in src],
        lemmas=[w.lemma for w in src],
        feats=[w.feats for w in src],
    )


def generate_pairs(n: int, seed: int) -> List[SyntheticPair]:
    """``n`` pairs with pairwise distinct source sentences, deterministic for ``seed``."""
    generator = _Generator(seed)
    pairs: List[SyntheticPair] = []
    seen = set()
    attempts = 0
    while len(pairs) < n:
        attempts += 1
        if attempts > 20 * n + 1000:
            raise RuntimeError(f"could not sample {n} distinct sentences")
        pair = _to_pair(generator.sentence())
        key = " ".join(pair.source)
        if key not in seen:
            seen.add(key)
            pairs.append(pair)
    return pairs


# ----------------------------------------------------------------------------------
# Files
# ----------------------------------------------------------------------------------

SPLITS = ("train", "valid", "test")


def to_conllu(pair: SyntheticPair, sent_id: str) -> str:
    """The gold source tree of ``pair`` as one CoNLL-U sentence block (blank line after)."""
    lines = [f"# sent_id = {sent_id}", f"# text = {' '.join(pair.source)}"]
    for i, form in enumerate(pair.source):
        upos = pair.upos[i] if pair.upos else "_"
        lemma = pair.lemmas[i] if pair.lemmas else "_"
        feats = pair.feats[i] if pair.feats else "_"
        cols = [str(i + 1), form, lemma, upos, "_", feats, str(pair.heads[i] + 1),
                pair.deprels[i], "_", "_"]
        lines.append("\t".join(cols))
    return "\n".join(lines) + "\n\n"


def to_pharaoh(alignment: Sequence[Tuple[int, int]]) -> str:
    """``[(0, 0), (1, 2)]`` -> ``"0-0 1-2"``."""
    return " ".join(f"{i}-{j}" for i, j in alignment)


def write_split(pairs: Sequence[SyntheticPair], out_dir: str, split: str) -> Dict[str, str]:
    """Write ``split.{en,vf,en.conllu,align}`` under ``out_dir``; returns their paths."""
    paths = {kind: os.path.join(out_dir, f"{split}.{kind}")
             for kind in ("en", "vf", "en.conllu", "align")}
    with open(paths["en"], "w", encoding="utf-8") as f:
        f.writelines(" ".join(p.source) + "\n" for p in pairs)
    with open(paths["vf"], "w", encoding="utf-8") as f:
        f.writelines(" ".join(p.target) + "\n" for p in pairs)
    with open(paths["en.conllu"], "w", encoding="utf-8") as f:
        f.writelines(to_conllu(p, f"{split}-{k + 1}") for k, p in enumerate(pairs))
    with open(paths["align"], "w", encoding="utf-8") as f:
        f.writelines(to_pharaoh(p.alignment) + "\n" for p in pairs)
    return paths


def generate_corpus(out_dir: str, seed: int = 1, train: int = 20000, valid: int = 500,
                    test: int = 500) -> dict:
    """Generate the three splits into ``out_dir`` and return a summary.

    All sentences are distinct, across splits too. The test set is drawn first and
    valid second, so they do not change when only the train size changes.
    """
    sizes = {"train": train, "valid": valid, "test": test}
    for split, size in sizes.items():
        if size < 0:
            raise ValueError(f"{split} size must be >= 0, got {size}")
    os.makedirs(out_dir, exist_ok=True)
    pairs = generate_pairs(train + valid + test, seed)
    chunks = {"test": pairs[:test], "valid": pairs[test:test + valid],
              "train": pairs[test + valid:]}
    paths = {split: write_split(chunks[split], out_dir, split) for split in SPLITS}
    return {"out_dir": out_dir, "seed": seed, "sizes": sizes, "paths": paths}


# ----------------------------------------------------------------------------------
# Agreement accuracy
# ----------------------------------------------------------------------------------

_TOKEN = re.compile(r"\w+|[^\w\s]")


def main_verb_number(sentence: str) -> Optional[str]:
    """The number of the last vf verb form in ``sentence`` (the target is verb-final)."""
    numbers = [verb_number(t) for t in _TOKEN.findall(sentence)]
    numbers = [n for n in numbers if n is not None]
    return numbers[-1] if numbers else None


def agreement_counts(hypotheses: Sequence[str], references: Sequence[str]) -> Tuple[int, int]:
    """(correct, total): sentences whose main verb has the reference main verb's number."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    correct = 0
    for k, (hyp, ref) in enumerate(zip(hypotheses, references)):
        expected = main_verb_number(ref)
        if expected is None:
            raise ValueError(f"reference {k + 1} has no vf verb form: {ref!r}")
        correct += main_verb_number(hyp) == expected
    return correct, len(references)


def agreement_accuracy(hypotheses: List[str], references: List[str]) -> float:
    """Share (0..1) of hypotheses whose main verb agrees like the reference's.

    The main verb is the last verb form of a sentence (identified through the lexicon);
    a hypothesis without any verb form counts as wrong. Sentences may be whitespace
    tokenised or detokenised. Returns 0.0 for empty input.
    """
    correct, total = agreement_counts(hypotheses, references)
    return correct / total if total else 0.0


# ----------------------------------------------------------------------------------
# Console scripts
# ----------------------------------------------------------------------------------


def main(argv: Optional[List[str]] = None) -> int:
    """``fairseq-syntax-synthetic``: write the synthetic corpus to a directory."""
    parser = argparse.ArgumentParser(
        prog="fairseq-syntax-synthetic",
        description="Generate the synthetic en->vf corpus (text, gold CoNLL-U trees, "
        "gold Pharaoh alignments) for train/valid/test.",
    )
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="output directory (created if missing)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default: 1)")
    parser.add_argument("--train", type=int, default=20000,
                        help="number of training pairs (default: 20000)")
    parser.add_argument("--valid", type=int, default=500,
                        help="number of validation pairs (default: 500)")
    parser.add_argument("--test", type=int, default=500,
                        help="number of test pairs (default: 500)")
    args = parser.parse_args(argv)
    for name in SPLITS:
        if getattr(args, name) < 0:
            parser.error(f"--{name} must be >= 0")
    summary = generate_corpus(args.out, args.seed, args.train, args.valid, args.test)
    sizes = summary["sizes"]
    print(f"wrote {sizes['train']}/{sizes['valid']}/{sizes['test']} train/valid/test pairs "
          f"(.en .vf .en.conllu .align) to {args.out} (seed {args.seed})")
    return 0


def _read_lines(path: str) -> List[str]:
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def score_main(argv: Optional[List[str]] = None) -> int:
    """``fairseq-syntax-score-agreement``: main-verb agreement accuracy of a system output."""
    parser = argparse.ArgumentParser(
        prog="fairseq-syntax-score-agreement",
        description="Share of hypotheses whose main (last) verb has the same number as "
        "the reference's main verb, in the synthetic vf language.",
    )
    parser.add_argument("--hyp", required=True, metavar="FILE",
                        help="system output, one vf sentence per line")
    parser.add_argument("--ref", required=True, metavar="FILE",
                        help="reference vf sentences, one per line (e.g. test.vf)")
    args = parser.parse_args(argv)
    hyps, refs = _read_lines(args.hyp), _read_lines(args.ref)
    if len(hyps) != len(refs):
        parser.error(f"line counts differ: {args.hyp} has {len(hyps)} lines, "
                     f"{args.ref} has {len(refs)}")
    try:
        correct, total = agreement_counts(hyps, refs)
    except ValueError as err:
        parser.error(f"{args.ref}: {err}")
    accuracy = 100.0 * correct / total if total else 0.0
    print(f"agreement accuracy: {accuracy:.2f} ({correct}/{total})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
