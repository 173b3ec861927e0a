"""An embedded, syntax-sensitive synthetic parallel corpus (English -> ``vf``).

The corpus is generated in the package (nothing to download) and comes with gold
source dependency trees (CoNLL-U) and gold word alignments (Pharaoh), so the
syntax- and alignment-aware models of this plugin can be trained and checked on a
task where syntax provably matters.

Source language (``en``)
    An English fragment from a small grammar: ``S -> NP V NP "."``, where a noun phrase
    is ``Det Adj* N`` optionally followed by *one* modifier, either a prepositional
    phrase (``near the cats``) or a subject relative clause (``that chased the bird``),
    whose noun phrases may again carry a modifier, up to :data:`MAX_DEPTH` levels. A
    quarter of the sentences (:data:`P_FRONTED`) open with a fronted PP (``near the cats
    the dog saw the bird .``, ``obl`` of the verb) whose nouns have the other number, so
    the subject head is not simply the first noun. Because each noun takes at most one
    modifier, every sentence has exactly one parse. Verbs are in the past tense (``saw``, ``chased``), so **the English verb
    form carries no number**: "the dog saw" and "the dogs saw" share their verb.

Target language (``vf``, "verb-final")
    An invented language with its own word forms (a fixed lexicon maps each English
    lemma to an invented stem). Its order is SOV: ``subject-NP object-NP verb "."``;
    relative clauses are verb-final too (``REL object-NP verb``), adjectives precede
    the noun, modifiers (PPs, relative clauses) follow it, and adpositions are
    postpositions (``NP pres`` = "near NP"). Determiners and nouns mark number
    (``ko vask`` "the dog", ``kos vaski`` "the dogs"), a fronted PP stays in front
    (``kos mirni pres``), and **every verb agrees in number with its own subject**: the main verb with the head noun of the main subject, a
    relative-clause verb with the noun the clause modifies (``vid-et`` singular,
    ``vid-en`` plural).

Why it is syntax-sensitive
    To choose the target verb form, a model has to find the head noun of the verb's
    subject in the source, and the source verb does not help. Between that noun and
    the verb stand PPs and relative clauses whose nouns usually have the *other*
    number (attractors, see :data:`P_ATTRACTOR`), and in the target the whole object
    noun phrase stands between the subject and the verb as well. A model that copies
    the number of the closest (or of the first) noun gets agreement wrong; one that follows the tree
    (``nsubj`` of the root, ``acl:relcl`` to the modified noun) gets it right.
    :func:`agreement_accuracy` measures this on the main verb.

Generalisation split (``gen``)
    The in-distribution splits are easy (a plain model reaches ~100 % agreement), so
    :func:`generate_gen_pairs` draws a harder set from the same lexicon with
    :data:`GENERALISATION` parameters: noun phrases nest up to 4 levels (training: 2),
    the subject always has a modifier, every sentence opens with a fronted PP, nested
    modifiers are likely and every noun of the fronted PP and of the subject has the
    other number than the subject head (attractor probability 1). Only sentences longer
    than any the training grammar can produce (:func:`max_source_length`, 45 words) are
    kept, so gen is disjoint from
    train/valid/test. Its seed is the corpus seed + :data:`GEN_SEED_OFFSET` (1000003).
    :func:`agreement_report` splits agreement accuracy by long-distance sentences (at
    least 2 attractors: nouns of the other number before the main verb).

Files (per split ``S`` in train/valid/test/gen, see :func:`generate_corpus`):
``S.en``, ``S.vf`` (one whitespace-tokenised sentence per line), ``S.en.conllu`` (gold
UD-style trees, one per line of ``S.en``), ``S.en.ptb`` (gold PTB-style bracketed
constituency trees of the same phrase structure, one line per line of ``S.en``, see
:func:`to_brackets`; ``fairseq-syntax-preprocess --ptb-suffix ptb`` reads them) and
``S.align`` (Pharaoh ``i-j``, 0-based, source index ``i``, target index ``j``; the
alignment is one-to-one).

Pure Python (the standard library; CoNLL-U and Pharaoh through
:mod:`fairseq_syntax.syntax.conllu_io` and :mod:`fairseq_syntax.syntax.pharaoh`): no
torch, no fairseq.
"""
import os
import random
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple, Union

from fairseq_syntax.syntax.conllu_io import format_conllu
from fairseq_syntax.syntax.pharaoh import format_pharaoh
from fairseq_syntax.syntax.text_io import atomic_text_file

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
P_FRONTED = 0.25  #: the sentence opens with a fronted PP whose nouns are attractors
ADJECTIVE_COUNT_WEIGHTS = (0.6, 0.3, 0.1)  #: weights for 0, 1, 2 adjectives


@dataclass(frozen=True)
class GrammarParams:
    """Generation parameters; the defaults are those of train/valid/test."""

    max_depth: int = MAX_DEPTH
    p_subject_modifier: float = P_SUBJECT_MODIFIER
    p_object_modifier: float = P_OBJECT_MODIFIER
    p_nested_modifier: float = P_NESTED_MODIFIER
    p_relative: float = P_RELATIVE
    p_attractor: float = P_ATTRACTOR
    p_definite: float = P_DEFINITE
    p_fronted: float = P_FRONTED
    adjective_count_weights: Tuple[float, ...] = ADJECTIVE_COUNT_WEIGHTS


DEFAULT_PARAMS = GrammarParams()
#: the gen split: deeper nesting, a modifier on every subject, every subject noun an attractor
GENERALISATION = GrammarParams(max_depth=4, p_subject_modifier=1.0, p_nested_modifier=0.8,
                               p_attractor=1.0, p_fronted=1.0)
GEN_SEED_OFFSET = 1000003  #: the gen split's seed is the corpus seed + this
#: bumped whenever the sentences of a seed change (2: fronted PPs); results record it
GRAMMAR_VERSION = 2


def max_source_length(params: GrammarParams = DEFAULT_PARAMS) -> int:
    """Upper bound of the source length (words) that ``params`` can produce."""
    np_words = 2 + len(params.adjective_count_weights) - 1  # Det Adj* N
    longest = [np_words]  # longest[k]: a noun phrase with k levels of modifiers below it
    for _ in range(params.max_depth):  # the longest modifier: "that V NP"
        longest.append(np_words + 2 + longest[-1])
    fronted = 1 + longest[-2] if params.p_fronted > 0 else 0  # "P NP", the NP at depth 1
    return fronted + 2 * longest[-1] + 2  # [fronted PP] subject V object "."


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
    fronted: Optional[PrepPhrase] = None


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
    brackets: str = ""  #: the gold constituency tree, PTB-style on one line (:func:`to_brackets`)


def _attach(word: Word, head: Optional[Word], deprel: str) -> Word:
    word.head, word.deprel = head, deprel
    return word


class _Generator:
    """Samples sentences from the grammar with its own ``random.Random``."""

    def __init__(self, seed: int, params: GrammarParams = DEFAULT_PARAMS):
        self.rng = random.Random(seed)
        self.params = params

    def number(self, attract_from: Optional[str]) -> str:
        """A noun's number; inside the subject usually the other one (an attractor)."""
        if attract_from is None:
            return self.rng.choice(NUMBERS)
        other = PL if attract_from == SG else SG
        return other if self.rng.random() < self.params.p_attractor else attract_from

    def noun_phrase(self, number: str, depth: int, p_modifier: float,
                    attract_from: Optional[str]) -> NounPhrase:
        """``Det Adj* N [modifier]``; the caller attaches the head noun."""
        sg, pl, stem = self.rng.choice(NOUNS)
        noun = Word(pl if number == PL else sg, _vf_noun(stem, number), "NOUN", sg,
                    "Number=Sing" if number == SG else "Number=Plur")
        definiteness = "def" if self.rng.random() < self.params.p_definite else "indef"
        en_det, vf_det = DETERMINERS[(definiteness, number)]
        det = _attach(Word(en_det, vf_det, "DET", en_det), noun, "det")
        weights = self.params.adjective_count_weights
        n_adj = self.rng.choices(range(len(weights)), weights)[0]
        adjectives = [_attach(Word(en, vf, "ADJ", en), noun, "amod")
                      for en, vf in self.rng.sample(ADJECTIVES, n_adj)]
        np = NounPhrase(det, adjectives, noun, number)
        if depth < self.params.max_depth and self.rng.random() < p_modifier:
            np.modifier = self.modifier(np, depth + 1, attract_from)
        return np

    def embedded_np(self, depth: int, attract_from: Optional[str]) -> NounPhrase:
        return self.noun_phrase(self.number(attract_from), depth, self.params.p_nested_modifier,
                                attract_from)

    def modifier(self, head: NounPhrase, depth: int,
                 attract_from: Optional[str]) -> Union[PrepPhrase, RelClause]:
        """A PP (``near the cats``) or subject relative clause modifying ``head``."""
        if self.rng.random() < self.params.p_relative:
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
        subject = self.noun_phrase(number, 0, self.params.p_subject_modifier, attract_from=number)
        obj = self.noun_phrase(self.number(None), 0, self.params.p_object_modifier,
                               attract_from=None)
        _attach(subject.noun, verb, "nsubj")
        _attach(obj.noun, verb, "obj")
        punct = _attach(Word(*PUNCT, "PUNCT", "."), verb, "punct")
        fronted = None
        if self.rng.random() < self.params.p_fronted:
            en, vf = self.rng.choice(PREPOSITIONS)
            np = self.embedded_np(1, attract_from=number)
            _attach(np.noun, verb, "obl")
            fronted = PrepPhrase(_attach(Word(en, vf, "ADP", en), np.noun, "case"), np)
        return Sentence(subject, verb, obj, punct, fronted)


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


#: PTB part-of-speech tags of the source words (nouns: NN, plural NNS)
_PTB_TAGS = {"DET": "DT", "ADJ": "JJ", "VERB": "VBD", "ADP": "IN", "PRON": "WDT", "PUNCT": "."}


def _ptb_word(word: Word) -> str:
    if word.upos == "NOUN":
        tag = "NNS" if word.feats == "Number=Plur" else "NN"
    else:
        tag = _PTB_TAGS[word.upos]
    return f"({tag} {word.en})"


def _ptb_np(np: NounPhrase) -> str:
    base = "(NP " + " ".join(_ptb_word(w) for w in (np.det, *np.adjectives, np.noun)) + ")"
    if isinstance(np.modifier, PrepPhrase):
        return f"(NP {base} {_ptb_pp(np.modifier)})"
    if isinstance(np.modifier, RelClause):
        clause = np.modifier
        return (f"(NP {base} (SBAR (WHNP {_ptb_word(clause.rel)}) "
                f"(S (VP {_ptb_word(clause.verb)} {_ptb_np(clause.obj)}))))")
    return base


def _ptb_pp(pp: PrepPhrase) -> str:
    return f"(PP {_ptb_word(pp.prep)} {_ptb_np(pp.np)})"


def to_brackets(sentence: Sentence) -> str:
    """The gold constituency tree of a source sentence, PTB-style on one line.

    ``(ROOT (S [PP] NP (VP V NP) (. .)))``; a noun phrase is ``(NP DT JJ* NN)``, with a
    modifier ``(NP (NP DT JJ* NN) PP)`` or ``(NP (NP DT JJ* NN) (SBAR (WHNP (WDT that))
    (S (VP VBD NP))))`` (Penn Treebank style: the modifier adjoins to the base NP, the
    relative clause's subject is the relative pronoun). Its leaves are the source words;
    every constituent is a connected piece of the gold dependency tree, and every word's
    dependency subtree spans a constituent.
    """
    parts = [_ptb_pp(sentence.fronted)] if sentence.fronted is not None else []
    parts += [_ptb_np(sentence.subject),
              f"(VP {_ptb_word(sentence.verb)} {_ptb_np(sentence.obj)})",
              _ptb_word(sentence.punct)]
    return "(ROOT (S " + " ".join(parts) + "))"


def _to_pair(sentence: Sentence) -> SyntheticPair:
    src, tgt = [], []
    if sentence.fronted is not None:  # "near the cats" / "kos mirni pres"
        src, tgt = [sentence.fronted.prep, *_en_np(sentence.fronted.np)], [
            *_vf_np(sentence.fronted.np), sentence.fronted.prep]
    src += [*_en_np(sentence.subject), sentence.verb, *_en_np(sentence.obj), sentence.punct]
    tgt += [*_vf_np(sentence.subject), *_vf_np(sentence.obj), sentence.verb, sentence.punct]
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
        brackets=to_brackets(sentence),
    )


def generate_pairs(n: int, seed: int, params: GrammarParams = DEFAULT_PARAMS,
                   min_length: int = 0) -> List[SyntheticPair]:
    """``n`` pairs with pairwise distinct source sentences, deterministic for ``seed``.

    Sentences shorter than ``min_length`` words are skipped (resampled).
    """
    generator = _Generator(seed, params)
    pairs: List[SyntheticPair] = []
    seen = set()
    attempts = 0
    while len(pairs) < n:
        attempts += 1
        if attempts > 100 * n + 1000:
            raise RuntimeError(f"could not sample {n} distinct sentences")
        pair = _to_pair(generator.sentence())
        key = " ".join(pair.source)
        if key not in seen and len(pair.source) >= min_length:
            seen.add(key)
            pairs.append(pair)
    return pairs


def generate_gen_pairs(n: int, seed: int) -> List[SyntheticPair]:
    """The gen split of the corpus with seed ``seed`` (see the module docstring).

    :data:`GENERALISATION` parameters, seed ``seed + GEN_SEED_OFFSET``, and only
    sentences longer than :func:`max_source_length` of the training grammar.
    """
    return generate_pairs(n, seed + GEN_SEED_OFFSET, GENERALISATION,
                          min_length=max_source_length(DEFAULT_PARAMS) + 1)


# ----------------------------------------------------------------------------------
# Files
# ----------------------------------------------------------------------------------

SPLITS = ("train", "valid", "test")
GEN_SPLIT = "gen"


def to_conllu(pair: SyntheticPair, sent_id: str) -> str:
    """The gold source tree of ``pair`` as one CoNLL-U sentence block (blank line after)."""
    return format_conllu(pair.source, pair.heads, pair.deprels, [("sent_id", sent_id)],
                         pair.lemmas, pair.upos, pair.feats)


def write_split(pairs: Sequence[SyntheticPair], out_dir: str, split: str) -> Dict[str, str]:
    """Write ``split.{en,vf,en.conllu,en.ptb,align}`` under ``out_dir``; returns their paths."""
    paths = {kind: os.path.join(out_dir, f"{split}.{kind}")
             for kind in ("en", "vf", "en.conllu", "en.ptb", "align")}
    with atomic_text_file(paths["en"]) as f:
        f.writelines(" ".join(p.source) + "\n" for p in pairs)
    with atomic_text_file(paths["vf"]) as f:
        f.writelines(" ".join(p.target) + "\n" for p in pairs)
    with atomic_text_file(paths["en.conllu"]) as f:
        f.writelines(to_conllu(p, f"{split}-{k + 1}") for k, p in enumerate(pairs))
    with atomic_text_file(paths["en.ptb"]) as f:
        f.writelines(p.brackets + "\n" for p in pairs)
    with atomic_text_file(paths["align"]) as f:
        f.writelines(format_pharaoh(p.alignment) + "\n" for p in pairs)
    return paths


def generate_corpus(out_dir: str, seed: int = 1, train: int = 20000, valid: int = 500,
                    test: int = 500, gen: int = 500) -> dict:
    """Generate train/valid/test (and gen unless ``gen=0``) into ``out_dir``; a summary.

    All sentences are distinct, across splits too. The test set is drawn first and
    valid second, so they do not change when only the train size changes; gen
    (:func:`generate_gen_pairs`) depends on ``seed`` and ``gen`` only.
    """
    sizes = {"train": train, "valid": valid, "test": test, GEN_SPLIT: gen}
    for split, size in sizes.items():
        if size < 0:
            raise ValueError(f"{split} size must be >= 0, got {size}")
    if not gen:
        del sizes[GEN_SPLIT]
    os.makedirs(out_dir, exist_ok=True)
    pairs = generate_pairs(train + valid + test, seed)
    chunks = {"test": pairs[:test], "valid": pairs[test:test + valid],
              "train": pairs[test + valid:]}
    if gen:
        chunks[GEN_SPLIT] = generate_gen_pairs(gen, seed)
    paths = {split: write_split(chunk, out_dir, split) for split, chunk in chunks.items()}
    return {"out_dir": out_dir, "seed": seed, "sizes": sizes, "paths": paths}


def detokenize(sentence: str) -> str:
    """vf text as it is written: the final period attaches to the word before it."""
    return re.sub(r" +([.])", r"\1", sentence.strip())
