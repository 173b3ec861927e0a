"""Raw source text at translation time (``fairseq-interactive --task syntax_translation``).

fairseq-interactive hands the task raw lines (``task.get_interactive_tokens_and_lengths``),
builds a dataset from their token ids (``task.build_dataset_for_inference``) and then
calls ``task.inference_step`` with a sample whose ``net_input`` holds only
``src_tokens``/``src_lengths`` (its batches drop everything else). The task delegates
these hooks to one :class:`RawInputAdapter`, which holds what they share (the manifest,
dictionaries, parser, sentencepiece model, the lines last prepared, warnings given once):

1. **words**: splits each line into words as the training source was split, which the
   data-bin's ``syntax_manifest.json`` records (``source_tokenization``): ``parser`` (the
   spaCy pipeline's own tokenizer, as ``examples/multi30k/prepare.sh`` tokenised the
   training text) or ``whitespace`` (the line is given tokenised);
2. **subwords**: encodes the words with fairseq's ``--bpe`` when one is given
   (``--bpe sentencepiece --sentencepiece-model DATA/spm.model``), else with the
   data-bin's ``spm.model`` word by word, exactly as ``fairseq-syntax-preprocess`` did
   (a line of the source dictionary's pieces that holds ``▁`` is taken as sentencepiece
   pieces and kept; any other ``▁`` is text, as in preprocessing, with a warning); the
   pieces are regrouped into words at ``▁`` (a word is a piece starting with ``▁`` and
   the pieces after it that do not; :mod:`fairseq_syntax.syntax.subwords`);
3. **parse** (only when the model needs syntax): one tree per line over those words, with
   the spaCy parser recorded in the manifest (or ``--raw-input-parser``), sentence
   starts preset as in preprocessing (:mod:`fairseq_syntax.syntax.spacy_parser`); heads
   projected to subwords, the word of each piece, and the binary tree (binarised over
   words, each word's pieces hung below it) by preprocessing's own step
   (:func:`fairseq_syntax.syntax.annotate.annotate`); a data-bin whose
   side-files are of another format version is refused, as in training; one whose
   trees came from bracketed constituency parses (``--ptb-suffix``, manifest
   ``tree_source``) gets a warning: raw input has no such parse, so its trees are the
   head-outward binarisation of the dependency parse, other phrases than in training;
4. **side tensors**: the dataset carries the side-file rows of each line
   (:meth:`RawSource.side_row`) and its collater builds the model's side inputs as in
   training (:mod:`fairseq_syntax.data.side_inputs`); ``inference_step`` adds the same
   tensors (:func:`side_tensors`) to fairseq-interactive's bare sample by looking its
   rows up among the lines it prepared (:class:`RawInputBatch`,
   :meth:`RawInputAdapter.add_side_inputs`);
5. **word alignments**: with ``--print-alignment`` (hard), the subword links
   ``(source piece, target piece)`` are collapsed to word links ``(source word, target
   word)``: each piece maps to the word it belongs to (target words are the
   hypothesis's ``▁`` groups), duplicates are removed, links are sorted. Source word
   ``i`` is the ``i``-th word of step 1 (0-based), target word ``j`` the ``j``-th word of
   the detokenised hypothesis. Soft alignments (``--print-alignment soft``) stay at
   subword level.
"""
import logging
import os
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch

from fairseq_syntax.syntax.annotate import Annotation, annotate, encode_words
from fairseq_syntax.syntax.subwords import (
    WORD_START, pieces_per_word, word_forms, word_index_of_pieces, word_links, words_row,
)

from . import side_inputs
from fairseq_syntax.syntax.errors import SyntaxInputError

from .side_files import MANIFEST, SPM_SHA256, check_format_version, file_sha256, read_manifest
from .side_inputs import SIDE_INPUTS
from .tree_tensors import BatchRows

logger = logging.getLogger(__name__)


_unchecked_warned = set()


def check_sentencepiece_model(data_dir: str, manifest: dict, path: Optional[str] = None) -> str:
    """The data-bin's sentencepiece model (the manifest's ``spm_model``), or ``path`` (a
    ``--sentencepiece-model`` given), checked against the sha256 the manifest records: a
    missing or different model would turn raw input into other subwords (mostly
    ``<unk>``), so it is a :class:`SyntaxInputError` naming the file. A manifest without
    the checksum (made before it was recorded) is accepted unchecked, with a warning."""
    name = manifest.get("spm_model", "spm.model")
    path = path or os.path.join(data_dir, name)
    manifest_path = os.path.join(data_dir, MANIFEST)
    if not os.path.isfile(path):
        raise SyntaxInputError(
            "the sentencepiece model is missing, so raw input cannot be split into the "
            f"subwords the model was trained on: put back the {name} that "
            f"fairseq-syntax-preprocess wrote into the data-bin, or rebuild the data-bin", path)
    recorded = manifest.get(SPM_SHA256)
    if recorded is None:
        if path not in _unchecked_warned:
            logger.warning("%s records no sha256 of %s (made before it was recorded): %s is "
                           "used unchecked; another model gives other subwords",
                           manifest_path, name, path)
            _unchecked_warned.add(path)
        return path
    have = file_sha256(path)
    if have != recorded:
        raise SyntaxInputError(
            f"sha256 {have[:16]}... is not the {recorded[:16]}... that {manifest_path} "
            "records: not the sentencepiece model that made the data-bin, so raw input "
            f"would become other subwords; use the data-bin's own {name}, or rebuild the "
            "data-bin with this model (--spm-model)", path)
    return path


def data_bin_sentencepiece(data_dir: str, manifest: Optional[dict] = None):
    """The data-bin's sentencepiece model (the manifest's ``spm_model``, default
    ``spm.model``) that encoded its source words one by one, checked against its manifest
    (:func:`check_sentencepiece_model`); None for a data-bin without manifest and model."""
    manifest = read_manifest(data_dir) if manifest is None else manifest
    if manifest:
        path = check_sentencepiece_model(data_dir, manifest)
    else:
        path = os.path.join(data_dir, "spm.model")
        if not os.path.exists(path):
            return None
    import sentencepiece as spm

    return spm.SentencePieceProcessor(model_file=path)


def check_utf8(line: str, number: int) -> None:
    """Refuse a raw input line that held bytes that are not UTF-8 (decoded with
    ``surrogateescape``, as Python reads standard input under the C locale, they are lone
    surrogates that sentencepiece cannot take), naming the line and the byte."""
    try:
        line.encode("utf-8")
    except UnicodeEncodeError as err:
        char = line[err.start]
        byte = (f"byte 0x{ord(char) - 0xDC00:02x}" if 0xDC80 <= ord(char) <= 0xDCFF
                else f"character U+{ord(char):04X}")
        raise SyntaxInputError(
            f"raw input line {number}: {byte} at character {err.start + 1} is not UTF-8 text "
            f"({line[:err.start][-30:]!r} comes before it): give the input as UTF-8, e.g. "
            "convert it with iconv -f LATIN1 -t UTF-8") from None


@dataclass
class RawSource:
    """One raw input line, ready for the model."""

    words: List[str]  # the words parsed (one per subword group)
    pieces: List[str]
    pieces_per_word: List[int]
    tokens: torch.Tensor  # dictionary ids, eos last
    annotation: Optional[Annotation] = None  # its side-file rows, once parsed

    @property
    def word_of_piece(self) -> List[int]:
        return word_index_of_pieces(self.pieces_per_word)

    @property
    def heads(self) -> Optional[torch.Tensor]:
        """[n + 1] long, None until parsed."""
        return None if self.annotation is None else torch.from_numpy(self.annotation.heads).long()

    @property
    def tree(self) -> Optional[torch.Tensor]:
        """[n - 1, 2] long, None until parsed."""
        if self.annotation is None:
            return None
        return torch.from_numpy(self.annotation.tree).long().view(-1, 2)

    @property
    def words_row(self) -> torch.Tensor:
        """The ``words`` side-file row: the word of each piece, then ``-1`` for eos."""
        return torch.from_numpy(words_row(self.pieces_per_word)).long()

    def side_row(self, name: str) -> torch.Tensor:
        """This line's row of the side-file of side input ``name``, as the data-bin's."""
        if name == "heads":
            return self.heads
        if name == "words":
            return self.words_row
        if name == "tree":
            return self.tree.reshape(-1)
        raise KeyError(f"side input {name!r} has no side-file")


class RawInputBatch:
    """The lines last prepared, looked up by their token ids (pad stripped)."""

    def __init__(self, sources: Sequence[RawSource]):
        self.by_tokens: Dict[Tuple[int, ...], RawSource] = {
            tuple(s.tokens.tolist()): s for s in sources
        }

    def lookup(self, row: torch.Tensor, pad: int) -> Optional[RawSource]:
        return self.by_tokens.get(tuple(row[row.ne(pad)].tolist()))


def side_tensors(sources: Sequence[RawSource], src_len: int,
                 names: Iterable[str]) -> Dict[str, torch.Tensor]:
    """``{net_input key: tensor}`` of the model inputs ``names`` (and what they come with),
    exactly as :meth:`SyntaxLanguagePairDataset.collater` builds them (right-padded source)."""
    names = side_inputs.carried(names)
    tensors = side_inputs.collate(
        names, lambda spec: BatchRows.of([s.side_row(spec.name) for s in sources]), src_len)
    return {SIDE_INPUTS[name].key: tensor for name, tensor in tensors.items()}


class RawInputAdapter:
    """Raw input of ``fairseq-interactive`` for one data-bin: turns raw lines into
    :class:`RawSource` (words, subwords, parse) and serves the task's inference hooks.
    ``bpe_given``: fairseq's ``--bpe`` encodes the words (else the data-bin's spm.model)."""

    def __init__(self, data_dir: str, src_dict=None, tgt_dict=None, parser: Optional[str] = None,
                 tokenization: str = "auto"):
        self.data_dir = data_dir
        self.src_dict = src_dict
        self.tgt_dict = tgt_dict
        self.bpe_given = False
        self.batch: Optional[RawInputBatch] = None  # the lines last prepared
        self.manifest = read_manifest(data_dir)
        self.parser_name = parser or self._recorded_parser()
        if tokenization == "auto":
            tokenization = self.manifest.get("source_tokenization") or "whitespace"
        if tokenization not in ("whitespace", "parser"):
            raise ValueError(f"unknown raw-input tokenization {tokenization!r}")
        self.tokenization = tokenization
        self._parser = None
        self._sp = None
        self._regroup_warned = False
        self._word_start_warned = False
        self._tree_source_warned = False
        self.lines_prepared = 0  # raw input lines seen by prepare(), to name a bad one

    def _recorded_parser(self) -> Optional[str]:
        record = (self.manifest.get("parse") or {}).get("parser") or {}
        name = record.get("name")
        if name is None:
            return None
        if os.path.sep in name or name.startswith("."):  # a folder: use its absolute path
            return record.get("package") or name
        return name

    @property
    def parser(self):
        """The spaCy parser (loaded on first use)."""
        if self._parser is None:
            if self.parser_name is None:
                raise ValueError(
                    f"{os.path.join(self.data_dir, MANIFEST)} records no spaCy parser (the "
                    "data-bin was made from CoNLL-U files), so raw input cannot be parsed "
                    "the same way: give --raw-input-parser NAME_OR_PATH"
                )
            from fairseq_syntax.syntax.spacy_parser import SpacyParser

            self._parser = SpacyParser(self.parser_name)
            recorded = ((self.manifest.get("parse") or {}).get("parser") or {})
            fingerprint = recorded.get("fingerprint")
            if fingerprint and fingerprint != self._parser.info.fingerprint:
                logger.warning(
                    "the spaCy pipeline %s differs from the one that parsed the training "
                    "data (%s %s): raw input is parsed by another model",
                    self.parser_name, recorded.get("package"), recorded.get("version"),
                )
        return self._parser

    def words(self, line: str) -> List[str]:
        if self.tokenization == "parser":
            from fairseq_syntax.syntax.spacy_parser import raw_words

            return raw_words(self.parser.nlp, line)
        return line.split()

    def _spm(self):
        if self._sp is None:
            self._sp = data_bin_sentencepiece(self.data_dir, self.manifest)
        return self._sp

    def encode(self, lines: Sequence[str],
               encode_fn: Optional[Callable[[str], str]] = None) -> List[RawSource]:
        """Words and subword tokens of each line. ``encode_fn`` is fairseq-interactive's
        (tokenizer +) bpe; None: the data-bin's spm.model, word by word."""
        dictionary = self.src_dict
        out = []
        sp = self._spm() if encode_fn is None else None
        for line in lines:
            if WORD_START in line:
                pieces = line.split()
                unknown = [p for p in pieces if p not in dictionary.indices]
                if encode_fn is None and not unknown:
                    # sentencepiece pieces of the dictionary (as fairseq-generate prints
                    # them): keep them
                    counts = pieces_per_word(pieces, "sentencepiece")
                    tokens = dictionary.encode_line(" ".join(pieces), add_if_not_exist=False,
                                                    append_eos=True).long()
                    out.append(RawSource(word_forms(pieces, counts, WORD_START), pieces,
                                         counts, tokens))
                    continue
                self._warn_word_start(line, unknown if encode_fn is None else None,
                                      subwords=encode_fn is not None or sp is not None)
            words = self.words(line)
            if encode_fn is not None:
                pieces = encode_fn(" ".join(words)).split()
                counts = pieces_per_word(pieces, "auto")
            elif sp is not None:
                per_word = encode_words(sp, [words])[0]
                kept = [(w, p) for w, p in zip(words, per_word) if p]
                words = [w for w, _ in kept]
                pieces = [x for _, p in kept for x in p]
                counts = [len(p) for _, p in kept]
            else:
                pieces = list(words)
                counts = [1] * len(words)
            if len(counts) != len(words):
                # the bpe (or a fairseq --tokenizer) split words differently: parse its groups
                if not self._regroup_warned:
                    logger.warning(
                        "raw input: the subword groups differ from the words (%d vs %d); "
                        "parsing the subword groups instead", len(counts), len(words))
                    self._regroup_warned = True
                words = word_forms(pieces, counts, WORD_START)
            tokens = dictionary.encode_line(" ".join(pieces), add_if_not_exist=False,
                                            append_eos=True).long()
            out.append(RawSource(words, pieces, counts, tokens))
        return out

    def _warn_word_start(self, line: str, unknown: Optional[Sequence[str]],
                         subwords: bool) -> None:
        """A ``▁`` in a line that is not kept as pieces is text (warned once)."""
        if self._word_start_warned:
            return
        marked = ", ".join(repr(w) for w in line.split() if WORD_START in w)
        why = "" if unknown is None else (
            " but is not a line of the dictionary's pieces ("
            + ", ".join(repr(p) for p in unknown[:5]) + " not in it)")
        how = ", where sentencepiece takes it for a space" if subwords else ""
        logger.warning(
            "raw input %r holds '%s' (U+2581, sentencepiece's word mark) in %s%s: it is "
            "read as text, as fairseq-syntax-preprocess reads it%s; remove the '%s' if the "
            "line is not meant so", line[:80], WORD_START, marked, why, how, WORD_START)
        self._word_start_warned = True

    def parse(self, sources: Sequence[RawSource]) -> None:
        """Parse each source's words and attach projected heads and binary trees."""
        if self.manifest:  # the model was trained on this data-bin's side-files
            check_format_version(self.data_dir, self.manifest)
        if self.manifest.get("tree_source") == "constituency" and not self._tree_source_warned:
            logger.warning(
                "%s: the binary trees of this data-bin are binarised bracketed constituency "
                "parses (--ptb-suffix); raw input has none, so its binary trees are the "
                "head-outward binarisation of the dependency parse: a model that reads the "
                "tree (tree2seq) sees other phrases than in training",
                os.path.join(self.data_dir, MANIFEST))
            self._tree_source_warned = True
        todo = [s for s in sources if s.words]
        trees = self.parser.parse([s.words for s in todo], workers=1, progress=False,
                                  desc="raw input") if todo else []
        word_heads = {id(s): parsed.heads for s, parsed in zip(todo, trees)}
        for source in sources:  # an empty line: eos alone, its own root
            source.annotation = annotate(source.pieces_per_word, word_heads.get(id(source), []))

    # ------------------------------------------------------------- the task's hooks

    def prepare(self, lines: Sequence[str], encode_fn, parse: bool) -> List[torch.Tensor]:
        """``get_interactive_tokens_and_lengths``: the token ids of each line, keeping its
        words, subword groups and (with ``parse``) its parse for the later hooks."""
        for k, line in enumerate(lines):
            check_utf8(line, self.lines_prepared + k + 1)
        self.lines_prepared += len(lines)
        sources = self.encode(lines, encode_fn if self.bpe_given else None)
        if parse:
            self.parse(sources)
        self.batch = RawInputBatch(sources)
        return [s.tokens for s in sources]

    def sources_of(self, src_tokens: torch.Tensor) -> Optional[List[Optional[RawSource]]]:
        """The prepared raw line of each row of ``src_tokens`` (None where unknown)."""
        if self.batch is None:
            return None
        pad = self.src_dict.pad()
        return [self.batch.lookup(row, pad) for row in src_tokens]

    def side_rows(self, src_tokens: Sequence[torch.Tensor], names: Iterable[str]
                  ) -> Dict[str, List[torch.Tensor]]:
        """``build_dataset_for_inference``: the side-file rows of the model inputs ``names``
        for each row of ``src_tokens``. Rows not prepared by :meth:`prepare` (e.g. the hub
        interface) are decoded to pieces, regrouped into words and parsed."""
        sources = self.sources_of(src_tokens)
        if sources is None or any(s is None or s.annotation is None for s in sources):
            eos = self.src_dict.eos()
            lines = [self.src_dict.string(t[t.ne(eos)], "sentencepiece") for t in src_tokens]
            sources = self.encode(lines)
            for source, tokens in zip(sources, src_tokens):
                if source.tokens.tolist() != list(tokens.tolist()):
                    raise ValueError(
                        "this model needs source syntax, and raw input is parsed from "
                        "words; pass the input through fairseq-interactive (or encode "
                        "it with the data-bin's spm.model)"
                    )
            self.parse(sources)
            self.batch = RawInputBatch(sources)
        carried = side_inputs.carried(names)
        return {spec.name: [s.side_row(spec.name) for s in sources]
                for name, spec in SIDE_INPUTS.items() if spec.side_file and name in carried}

    def add_side_inputs(self, sample: dict, names: Iterable[str]):
        """``inference_step``: fairseq-interactive's batches carry only
        ``src_tokens``/``src_lengths``; returns ``(sample, sources)``, the sample with the
        side tensors of the model inputs ``names`` added (when missing) and the raw line of
        each row (None when some row is not a prepared line)."""
        net_input = sample["net_input"]
        sources = self.sources_of(net_input["src_tokens"])
        if sources is not None and any(s is None for s in sources):
            sources = None
        if any(key not in net_input for key in side_inputs.model_input_keys(names)):
            if sources is None:
                raise ValueError(
                    f"this model needs source syntax ({', '.join(sorted(names))}) that the "
                    "batch does not carry"
                )
            extra = side_tensors(sources, net_input["src_tokens"].size(1), names)
            device = net_input["src_tokens"].device
            sample = dict(sample)
            sample["net_input"] = {**net_input, **{k: v.to(device) for k, v in extra.items()}}
        return sample, sources

    def word_level_alignments(self, hypos, sources: Sequence[RawSource]) -> None:
        """Hard alignments of each hypothesis, ``(source piece, target piece)``, collapsed
        to ``(source word, target word)`` in place; soft ones stay at subword level."""
        for source, beams in zip(sources, hypos):
            src_word_of = source.word_of_piece
            for hypo in beams:
                links = hypo.get("alignment")
                if links is None or len(links) == 0 or not isinstance(links[0], (tuple, list)):
                    continue
                if len(links[0]) != 2 or isinstance(links[0][0], str):
                    continue  # soft alignments: left at subword level
                tokens = [t for t in hypo["tokens"].tolist() if t != self.tgt_dict.eos()]
                pieces = [self.tgt_dict[t] for t in tokens]
                tgt_word_of = word_index_of_pieces(pieces_per_word(pieces, "sentencepiece"))
                hypo["alignment"] = word_links(links, src_word_of, tgt_word_of)
