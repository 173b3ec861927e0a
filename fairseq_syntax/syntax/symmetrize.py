"""Symmetrising two directional word alignments: grow-diag-final-and (Koehn et al. 2003; Moses'
``train-model.perl``).

Start from the intersection; grow-diag: for every aligned point in row-major order, add each of
its 8 neighbours that is in the union and whose source or target word is unaligned, until a pass
adds nothing; final-and: for each direction (source-to-target first), add its points (row-major)
whose source and target words are both unaligned.  Links are 0-based ``(source, target)`` in both
inputs (as eflomal and fast_align write the reverse direction).
"""
from bisect import bisect_right, insort
from typing import Iterable, List, Set, Tuple

Link = Tuple[int, int]

# Koehn's order: the 4 direct neighbours, then the 4 diagonal ones.
NEIGHBOURS: Tuple[Link, ...] = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))


def _check(links: Iterable[Link], n_src: int, n_tgt: int, what: str) -> Set[Link]:
    out = {(int(i), int(j)) for i, j in links}
    for i, j in out:
        if not (0 <= i < n_src and 0 <= j < n_tgt):
            raise ValueError(
                f"{what} link {i}-{j} is out of range (source has {n_src} words, target "
                f"has {n_tgt} words)"
            )
    return out


def grow_diag_final_and(
    forward: Iterable[Link], reverse: Iterable[Link], n_src: int, n_tgt: int
) -> List[Link]:
    """Symmetrised sorted links of one pair; a link outside ``n_src``/``n_tgt`` raises ``ValueError``."""
    fwd = _check(forward, n_src, n_tgt, "forward")
    rev = _check(reverse, n_src, n_tgt, "reverse")
    if fwd == rev:  # intersection == union: nothing to grow, every point already aligned
        return sorted(fwd)
    union = fwd | rev
    alignment = fwd & rev
    src_aligned = [False] * n_src
    tgt_aligned = [False] * n_tgt
    rows: List[List[int]] = [[] for _ in range(n_src)]  # aligned targets of each source word, sorted
    for i, j in alignment:
        rows[i].append(j)
        src_aligned[i] = tgt_aligned[j] = True
    for row in rows:
        row.sort()

    # grow-diag: only points of the union can ever be added, so the candidates are few.
    candidates = union - alignment
    changed = True
    while changed and candidates:
        changed = False
        # Row-major walk over the growing alignment: a point added ahead of the current
        # position is visited in this same pass, one added behind it in the next pass,
        # exactly as the pseudocode's nested loops over all (i, j) do.
        for i in range(n_src):
            row, k = rows[i], 0
            while k < len(row):
                j = row[k]
                for di, dj in NEIGHBOURS:
                    p = (i + di, j + dj)
                    if p in candidates and (not src_aligned[p[0]] or not tgt_aligned[p[1]]):
                        alignment.add(p)
                        insort(rows[p[0]], p[1])
                        src_aligned[p[0]] = tgt_aligned[p[1]] = True
                        candidates.discard(p)
                        changed = True
                k = bisect_right(row, j)  # the next aligned point after j in row i
    # final-and
    for direction in (fwd, rev):
        for i, j in sorted(direction):
            if not src_aligned[i] and not tgt_aligned[j]:
                alignment.add((i, j))
                src_aligned[i] = tgt_aligned[j] = True
    return sorted(alignment)
