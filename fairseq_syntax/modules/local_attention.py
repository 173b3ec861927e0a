"""Local-p attention (Luong et al. 2015) and syntax-directed attention (Chen et al. 2017).

Both re-weight the Luong scores around a predicted position ``p_i = L · sigmoid(vᵀ tanh(W_p h_i))``
(Chen et al. eq. 5).  Local-p: ``L = J``, the index of ``eos`` (Luong's source length), so its
window may hold ``eos``.  SDAtt: ``L = J - 1``, the last word: its centre is a word, never
``eos``, which is at :data:`~fairseq_syntax.data.tree_tensors.EOS_DISTANCE` from every word
(docs/design.md §3.3), so a centre at ``eos`` would see ``eos`` alone, and the nearest row between
the last word and ``eos`` gives ``p_i`` no gradient: with ``L = J`` a predictor that drifted there
stayed (on Multi30k, ``p_i`` at ``eos`` in 91 % of decoder steps after 4 epochs).  Functions give the weights; :class:`LocalPWeights` and
:class:`SyntaxDirectedWeights` add the predictor; :class:`LocalAttentionLayer` is the
single-context layer (double context: :mod:`~fairseq_syntax.modules.double_context`).
"""
import functools
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
from torch import Tensor

from fairseq_syntax.modules.global_attention import GlobalAttentionLayer, masked_softmax
from fairseq_syntax.modules.rnn_decoder import EXTRA


def last_positions(padding_mask: Tensor) -> Tensor:
    """Index ``J`` of ``eos`` in each right-padded sentence, ``[B]`` float."""
    return (~padding_mask).sum(1).to(torch.float32) - 1


def last_words(last_position: Tensor) -> Tensor:
    """Index ``J - 1`` of the last word (0 for a sentence of eos alone): SDAtt's range of ``p_i``."""
    return (last_position - 1).clamp(min=0)


def gaussian(offset: Tensor, sigma: float) -> Tensor:
    """``exp(-offset² / 2σ²)``."""
    return torch.exp(-offset.pow(2) / (2.0 * sigma * sigma))


class PositionPredictor(nn.Module):
    """``p_i = L · sigmoid(s · vᵀ tanh(W_p h_i))`` (Chen et al. eq. 5, Luong et al. eq. 9), ``L`` the
    last position the caller allows (local-p: eos; SDAtt: the last word), ``s`` the logit scale
    (:data:`POSITION_LOGIT_SCALE_HELP`; the papers' ``s = 1``)."""

    def __init__(self, query_dim: int, hidden_dim: Optional[int] = None, logit_scale: float = 1.0):
        super().__init__()
        hidden_dim = hidden_dim or query_dim
        self.proj = nn.Linear(query_dim, hidden_dim, bias=False)
        self.v = nn.Linear(hidden_dim, 1, bias=False)
        self.logit_scale = float(logit_scale)

    def forward(self, hidden: Tensor, last_position: Tensor) -> Tensor:
        """``[B, H]`` decoder state, ``[B]`` last position ``L`` -> ``[B]`` positions in ``[0, L]``."""
        logit = self.v(torch.tanh(self.proj(hidden))).squeeze(-1) * self.logit_scale
        return last_position.to(logit.dtype) * torch.sigmoid(logit)


POSITION_LOGIT_SCALE_HELP = (
    "multiplies the position predictor's logit v^T tanh(W_p h) of eq. 5 (1: the papers). Under "
    "Adam a parameter moves about lr per update whatever its gradient's size, so a scale s moves "
    "p_i about s times as fast: the predictor alone trains as with learning rate s * lr and "
    "starts s times nearer the middle of the source. Chen et al. trained with ADADELTA"
)

SDATT_POSITION_LOGIT_SCALE = 0.05
"""SDAtt's default logit scale (local-p keeps Luong's 1): with ``s = 1`` the predictor
collapsed on Multi30k (``sdatt_double_syntax``, seed 1, Adam at 2e-3: 99.4 % of test_2016 target
steps at the first word after 2 epochs); with ``s = 0.05`` (as if the predictor trained at 1e-4,
Nematus's Adam rate) none were at the first word or eos (docs/architectures.md)."""


def position_logit_scale(cfg, kind: str) -> float:
    """``--position-logit-scale``, or its default for ``kind`` (``local_p``: 1, Luong's;
    ``syntax_directed``: :data:`SDATT_POSITION_LOGIT_SCALE`); 1 for a checkpoint trained
    before the option existed, as it was then."""
    if not hasattr(cfg, "position_logit_scale"):
        return 1.0
    if cfg.position_logit_scale is None:
        return SDATT_POSITION_LOGIT_SCALE if kind == "syntax_directed" else 1.0
    return float(cfg.position_logit_scale)


BEFORE_GAUSSIAN = "attn_before_gaussian"  # the decoder's extra: local-p's window softmax


def local_p_weights(scores: Tensor, position: Tensor, padding_mask: Tensor, window: float,
                    sigma: Optional[float] = None,
                    extras: Optional[Dict[str, Tensor]] = None) -> Tensor:
    """Luong et al. (2015) local-p weights (Chen et al. eqs. 6-7), ``[B, S]`` from ``scores`` ``[B, S]``.

    ``a_ij = softmax_{W_i}(e_i)_j · exp(-(j - p_i)² / 2σ²)`` on ``W_i = {j real : |j - p_i| <= D}``,
    0 outside, ``σ = D / 2``; as in Luong the Gaussian multiplies normalised weights (sum <= 1).
    ``extras[BEFORE_GAUSSIAN]`` gets the window softmax (what supervised attention supervises).
    """
    if window < 0.5:
        raise ValueError(f"the local window D must be >= 0.5 so that it holds a position, got {window}")
    sigma = window / 2.0 if sigma is None else sigma
    positions = torch.arange(scores.size(1), device=scores.device, dtype=torch.float32)
    offset = positions.unsqueeze(0) - position.float().unsqueeze(1)
    outside = offset.abs().gt(window) | padding_mask
    align = masked_softmax(scores, outside)
    if extras is not None:
        extras[BEFORE_GAUSSIAN] = align
    return align * gaussian(offset, sigma).type_as(align)


def row_interpolation(position: Tensor, last: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """Rows ``⌊p⌋``, ``⌈p⌉`` (long) and the weight ``t`` of ``⌈p⌉`` giving ``M[p]`` at a real
    ``p ∈ [0, J]`` (``J``: eos; ``last`` broadcasts to ``position``).  Linear between two words'
    rows, so eq. 5's predictor gets a gradient; between the last word and eos the nearest row
    (``t`` 0 or 1): eos is ``EOS_DISTANCE`` from every word, so interpolating there leaves the
    last word alone in the neighbourhood and, for ``t`` below ~0.003, gives ``p`` a gradient
    100-300 times the largest between two words."""
    last = last.to(torch.long)
    floor = torch.minimum(torch.floor(position.detach()).long(), last).clamp(min=0)
    high = torch.minimum(floor + 1, last)
    frac = position - floor.to(position.dtype)
    return floor, high, torch.where(high.eq(last), frac.detach().ge(0.5).to(frac.dtype), frac)


def distance_rows(distances: Tensor, positions: Tensor, last_position: Tensor) -> Tensor:
    """Syntax-distance rows ``M[p]`` (Chen et al. eq. 9) at real-valued ``p``, interpolated by
    :func:`row_interpolation`: ``distances`` ``[B, S, S]`` integer (the collater's int16),
    ``positions`` ``[B, N]``, ``last_position`` ``[B]`` -> ``[B, N, S]`` float."""
    src_len = distances.size(1)
    floor, ceil, frac = row_interpolation(positions.float(), last_position.long().unsqueeze(1))
    index = torch.cat([floor, ceil], dim=1)  # one gather for ⌊p⌋ and ⌈p⌉
    both = distances.gather(1, index.unsqueeze(2).expand(-1, -1, src_len)).float()
    low, high = both.split(positions.size(1), dim=1)
    return low + frac.unsqueeze(2) * (high - low)


def word_distance_rows(distances: Tensor, positions: Tensor, last_position: Tensor) -> Tensor:
    """``M[p]`` linear between the rows of consecutive words' first pieces, ``[B, N, S]``: for
    ``p`` in ``[s_k, s_{k+1})``, ``(1 - t) M[s_k] + t M[s_{k+1}]`` with ``t = (p - s_k) / (s_{k+1}
    - s_k)``; in the last word, its first piece's row.  Pieces of one word share a row, so
    :func:`distance_rows` is flat inside a word and gives ``p`` no gradient there (a third
    of KFTT en→ja's valid target steps); with one-piece words the two agree.  A piece starts a
    word where it is at a distance from the piece before (docs/design.md §3.3)."""
    batch, src_len = distances.shape[:2]
    index = torch.arange(src_len, device=distances.device)
    last = last_position.long()
    starts = torch.ones(batch, src_len, dtype=torch.bool, device=distances.device)
    starts[:, 1:] = distances[:, index[:-1], index[1:]].ne(0)
    starts &= index[None, :] < last[:, None]  # words only, never eos or padding
    beyond = torch.full_like(starts, src_len, dtype=torch.long)
    before = torch.where(starts, index[None, :], torch.zeros_like(beyond)).cummax(1).values
    from_here = torch.where(starts, index[None, :], beyond).flip(1).cummin(1).values.flip(1)
    after = torch.cat([from_here[:, 1:], beyond[:, :1]], dim=1)  # the first start > k
    floor = torch.minimum(torch.floor(positions.detach()).long().clamp(min=0),
                          (last - 1).clamp(min=0)[:, None])
    low, high = before.gather(1, floor), after.gather(1, floor)
    inside = high.lt(last[:, None])  # a next word exists
    high = torch.where(inside, high, low)
    frac = torch.where(inside, (positions.float() - low) / (high - low).clamp(min=1),
                       torch.zeros_like(positions, dtype=torch.float32))
    rows = distances.gather(1, torch.cat([low, high], 1).unsqueeze(2).expand(-1, -1, src_len))
    first, second = rows.float().split(positions.size(1), dim=1)
    return first + frac.unsqueeze(2) * (second - first)


SYNTAX_ROWS = ("interpolate", "words", "nearest")
"""How :func:`distance_row` reads ``M`` at a real ``p_i``: between the rows of ``⌊p⌋`` and
``⌈p⌉`` (:func:`distance_rows`), between words' rows (:func:`word_distance_rows`), or the
nearest row (no gradient for the predictor)."""


def nearest_distance_row(distances: Tensor, position: Tensor, last_position: Tensor) -> Tensor:
    """``M`` at the row nearest ``p_i`` (no gradient for the predictor), ``[B, S]`` float."""
    nearest = torch.floor(position.float() + 0.5).long()
    nearest = torch.minimum(nearest, last_position.long()).clamp(min=0)
    return distances.gather(1, nearest[:, None, None].expand(-1, 1, distances.size(2))).squeeze(1).float()


def one_position(rows, distances: Tensor, position: Tensor, last_position: Tensor) -> Tensor:
    """``rows`` (:func:`distance_rows` or :func:`word_distance_rows`) at one position per
    sentence: ``position`` ``[B]`` -> ``[B, S]``."""
    return rows(distances, position.unsqueeze(1), last_position).squeeze(1)


def syntax_row_reader(how: str):
    """The function ``(distances [B, S, S], position [B], last_position [B]) -> [B, S]`` that
    reads ``M[p_i]`` as ``how`` says (:data:`SYNTAX_ROWS`); any other ``how`` is refused."""
    readers = {"interpolate": distance_rows, "words": word_distance_rows}
    if how in readers:
        return functools.partial(one_position, readers[how])
    if how == "nearest":
        return nearest_distance_row
    raise ValueError(f"--syntax-row must be one of {', '.join(SYNTAX_ROWS)}, got {how!r}")


def distance_row(distances: Tensor, position: Tensor, last_position: Tensor,
                 how: str = "interpolate") -> Tensor:
    """``M[p_i]`` at one real-valued ``p_i`` per sentence, ``[B, S]`` float, read as ``how``
    says (:data:`SYNTAX_ROWS`).  ``distances`` ``[B, S, S]`` integer, ``position`` and
    ``last_position`` ``[B]``."""
    return syntax_row_reader(how)(distances, position, last_position)


GAUSSIAN_READINGS = ("scores", "weights")
"""The two readings of the Gaussian of Chen et al. eq. 10 (see :func:`syntax_directed_weights`)."""

DEFAULT_GAUSSIAN_READING = "weights"
"""The reading the ``syntax_directed_rnn`` models use unless ``--syntax-gaussian`` says
otherwise, chosen by training stability: ``scores`` lets the model sharpen its attention by
growing the scores, which the global context shares.  ``sdatt_double_syntax``, seed 1:
synthetic (issue 14 sizes), ``scores`` diverged at epoch 6-7 (gnorm 0.78 -> 16 -> 10,953,
valid loss 1.18 -> 4.23, scores up to ±93) where ``weights`` fell smoothly (1.135 at epoch
6, gnorm 0.04); Multi30k (12-epoch anchor), valid ppl after epochs 1-4 ``weights`` 27.65,
13.75, 9.36, 7.43 against ``scores`` 32.06, 15.12, 9.86, 8.03 (then stalled: 6.96, 7.31)."""


def syntax_directed_weights(scores: Tensor, row: Tensor, padding_mask: Tensor, max_distance: float,
                            sigma: Optional[float] = None,
                            gaussian_on: str = DEFAULT_GAUSSIAN_READING) -> Tensor:
    """Syntax-directed weights, Chen et al. (2017) eqs. 10-11, ``[B, S]``, in one of two readings.

    ``"scores"`` (eq. 10 as written): ``softmax_{N_i}(e_ij · exp(-M[p_i][j]² / 2σ²))``; this raises
    far negative scores (-2, -2 at distances 0, 4, σ = 2 give 0.15, 0.85).  ``"weights"`` (the text,
    and Luong's local-p): ``softmax_{N_i}(e_i - M[p_i]² / 2σ²)``.  ``N_i = {j real : M[p_i][j] <= n}``
    plus the row's nearest position, so it is never empty with an interpolated row; ``σ = n / 2``.
    """
    if gaussian_on not in GAUSSIAN_READINGS:
        raise ValueError(f"gaussian_on must be one of {GAUSSIAN_READINGS} (the Gaussian of "
                         f"Chen et al. eq. 10 on the scores or on the weights), got {gaussian_on!r}")
    sigma = max_distance / 2.0 if sigma is None else sigma
    nearest = row.masked_fill(padding_mask, float("inf")).min(dim=1, keepdim=True).values
    outside = row.gt(torch.clamp(nearest, min=float(max_distance))) | padding_mask
    if gaussian_on == "scores":
        logits = scores.float() * gaussian(row, sigma)
    else:
        # the log of the Gaussian, added inside the neighbourhood only (outside it the row
        # may hold the huge padding distance; masked_softmax drops those logits anyway)
        logits = scores.float() - (row.masked_fill(outside, 0.0).pow(2) / (2.0 * sigma * sigma))
    return masked_softmax(logits, outside).type_as(scores)


class LocalPWeights(nn.Module):
    """Local-p weights (Luong et al. 2015) with their own position predictor."""

    def __init__(self, query_dim: int, window: float = 10.0, sigma: Optional[float] = None,
                 logit_scale: float = 1.0):
        super().__init__()
        self.predictor = PositionPredictor(query_dim, logit_scale=logit_scale)
        self.window = float(window)
        self.sigma = sigma

    def forward(self, hidden: Tensor, scores: Tensor, encoder_out: Dict[str, Tensor],
                state: Dict[str, Tensor], extras: Optional[Dict[str, Tensor]] = None) -> Tensor:
        position = self.predictor(hidden, state["last_position"])
        return local_p_weights(scores, position, encoder_out["padding_mask"], self.window, self.sigma,
                               extras)


class SyntaxDirectedWeights(nn.Module):
    """Syntax-directed weights (Chen et al. 2017) with their own predictor; reads ``src_distances``.

    ``row`` (:data:`SYNTAX_ROWS`, default ``interpolate``) reads ``M[p_i]`` between rows: the paper
    indexes ``M`` by a real ``p_i`` without saying how, and an integer row gives the predictor of
    eq. 5 no gradient.
    ``gaussian_on``: see :func:`syntax_directed_weights`, default :data:`DEFAULT_GAUSSIAN_READING`.
    """

    def __init__(self, query_dim: int, max_distance: float = 4.0, sigma: Optional[float] = None,
                 row: str = "interpolate", gaussian_on: str = DEFAULT_GAUSSIAN_READING,
                 logit_scale: float = 1.0):
        super().__init__()
        if gaussian_on not in GAUSSIAN_READINGS:
            raise ValueError(f"--syntax-gaussian must be one of {', '.join(GAUSSIAN_READINGS)}, "
                             f"got {gaussian_on!r}")
        self.predictor = PositionPredictor(query_dim, logit_scale=logit_scale)
        self.max_distance = float(max_distance)
        self.sigma = sigma
        self.read_row = syntax_row_reader(row)
        self.row = row
        self.gaussian_on = gaussian_on

    def extra_repr(self) -> str:
        return (f"max_distance={self.max_distance}, sigma={self.sigma}, "
                f"row={self.row!r}, gaussian_on={self.gaussian_on!r}")

    def forward(self, hidden: Tensor, scores: Tensor, encoder_out: Dict[str, Tensor],
                state: Dict[str, Tensor], extras: Optional[Dict[str, Tensor]] = None) -> Tensor:
        distances = encoder_out.get("src_distances")
        if distances is None:
            raise KeyError(
                "syntax-directed attention needs the source tree distances "
                "(net_input['src_distances']): train and generate with --task "
                "syntax_translation on a data-bin made by fairseq-syntax-preprocess"
            )
        last = state["last_position"]
        position = self.predictor(hidden, last_words(last))  # a word, never eos
        row = self.read_row(distances, position, last)
        return syntax_directed_weights(scores, row, encoder_out["padding_mask"], self.max_distance, self.sigma,
                                       self.gaussian_on)


class LocalAttentionLayer(GlobalAttentionLayer):
    """Single-context layer, local-p (Luong et al. 2015) or SDAtt (Chen et al. 2017, eqs. 5-13) weights.

    ``c = Σ_j a_j h̄_j``, ``h̃_t = tanh(W_c [c; h_t])``; the state adds ``last_position``.  Local-p's
    window softmax goes to the state as ``"extra." + BEFORE_GAUSSIAN`` (the decoder's extra).
    """

    def __init__(self, query_dim: int, key_dim: int, local_weights: nn.Module,
                 score: str = "general", output_dim=None):
        super().__init__(query_dim, key_dim, score, output_dim)
        self.local_weights = local_weights

    def init_state(self, encoder_out: Dict[str, Tensor]) -> Dict[str, Tensor]:
        state = super().init_state(encoder_out)
        state["last_position"] = last_positions(encoder_out["padding_mask"])
        return state

    def forward(self, hidden: Tensor, encoder_out: Dict[str, Tensor], state: Dict[str, Tensor]):
        scores = self.score(hidden, state["keys"])
        extras: Dict[str, Tensor] = {}
        weights = self.local_weights(hidden, scores, encoder_out, state, extras=extras)
        if extras:
            state = dict(state, **{EXTRA + k: v for k, v in extras.items()})
        return self.attentional_state(weights, hidden, state), weights, state
