"""Word alignments in Pharaoh format: ``i-j`` links, 0-based, source index first."""
import re
from typing import Iterable, List, Sequence, Tuple

Link = Tuple[int, int]

_LINK = re.compile(r"([0-9]+)-([0-9]+)")  # ASCII digits: \d takes any script's


def parse_pharaoh_line(text: str, n_src: int, n_tgt: int) -> List[Link]:
    """Parse one Pharaoh line into ``(source, target)`` links, in the order given.

    ``n_src``/``n_tgt`` are the sentence lengths the indices must fall in. A token that is
    not ``i-j`` or an index out of range raises ``ValueError`` naming the link (its
    1-based position and text) and both sentence lengths. An empty line has no links.
    """
    links = []
    for k, token in enumerate(text.split(), start=1):
        match = _LINK.fullmatch(token)
        if match is None:
            raise ValueError(
                f"link {k} {token!r} is not of the form i-j (0-based source-target indices)"
            )
        i, j = int(match.group(1)), int(match.group(2))
        if i >= n_src or j >= n_tgt:
            side, index, length = ("source", i, n_src) if i >= n_src else ("target", j, n_tgt)
            raise ValueError(
                f"link {k} {token!r}: {side} index {index} is out of range "
                f"(source sentence has {n_src} words, target sentence has {n_tgt} words; "
                f"indices are 0-based, so the {side} allows 0..{length - 1})"
            )
        links.append((i, j))
    return links


def _offsets(pieces_per_word: Sequence[int]) -> List[int]:
    offsets, total = [], 0
    for count in pieces_per_word:
        offsets.append(total)
        total += count
    return offsets


def project_alignment_to_subwords(
    links: Iterable[Link],
    src_pieces_per_word: Sequence[int],
    tgt_pieces_per_word: Sequence[int],
) -> List[Link]:
    """Project word links onto subword pieces.

    Every piece of source word ``i`` is linked to every piece of target word ``j`` for each
    word link ``(i, j)``. The result is sorted (source, then target) and deduplicated.
    A link outside the word counts raises ``ValueError``.
    """
    src_off = _offsets(src_pieces_per_word)
    tgt_off = _offsets(tgt_pieces_per_word)
    out = set()
    for i, j in links:
        if not (0 <= i < len(src_pieces_per_word) and 0 <= j < len(tgt_pieces_per_word)):
            raise ValueError(
                f"link {i}-{j} is out of range (source has {len(src_pieces_per_word)} words, "
                f"target has {len(tgt_pieces_per_word)} words)"
            )
        for a in range(src_off[i], src_off[i] + src_pieces_per_word[i]):
            for b in range(tgt_off[j], tgt_off[j] + tgt_pieces_per_word[j]):
                out.add((a, b))
    return sorted(out)


def format_pharaoh(links: Iterable[Link]) -> str:
    """Format links as a Pharaoh line, ``i-j`` separated by single spaces (no newline)."""
    return " ".join(f"{i}-{j}" for i, j in links)
