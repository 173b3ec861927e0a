"""Local-p attention (Luong et al. 2015) and syntax-directed attention (Chen et al. 2017).

Both re-weight the Luong alignment scores of the backbone around a position ``p_i``
that the decoder predicts from its hidden state (Chen et al. eq. 5):

    p_i = J · sigmoid(vᵀ tanh(W_p h_i))

**Positions.** The source is right-padded; its real positions are ``0 … J`` where
``J`` is the index of ``eos`` (the number of subword tokens without ``eos``), so
``p_i`` ranges over ``[0, J]``: every real position, ``eos`` included, and nothing
else. ``eos`` is the position unaligned target words are aligned to, so it is a
legitimate centre; but it is not a word: its syntax distance from every word is
:data:`~fairseq_syntax.data.tree_tensors.EOS_DISTANCE` (DESIGN.md §2), beyond every
neighbourhood ``n``, so a syntax-directed centre at ``eos`` attends to ``eos`` alone, and
for ``p_i`` between the last word and ``eos`` the interpolated row is far from every
position: the neighbourhood shrinks to the nearest one and ``p_i`` gets next to no
gradient there. (Distances are between words: the pieces of one word share a row, so
within a word the interpolated row does not change either.) No clamping is needed:
``sigmoid`` maps into ``(0, 1)`` (``[0, 1]`` after float
rounding), so ``p_i`` is always a valid, real-valued position.

The functions below take the scores, ``p`` and the source tensors and return the
weights over source positions; :class:`LocalPWeights` and
:class:`SyntaxDirectedWeights` add the predictor of ``p``; :class:`LocalAttentionLayer`
is the single-context attentional layer built on them (the double-context layer is in
:mod:`fairseq_syntax.modules.double_context`). Everything is batched: no Python loop
over sentences or positions.
"""
from typing import Dict, Optional

import torch
import torch.nn as nn
from torch import Tensor

from fairseq_syntax.modules.global_attention import GlobalAttentionLayer, masked_softmax
from fairseq_syntax.modules.rnn_decoder import EXTRA


def last_positions(padding_mask: Tensor) -> Tensor:
    """Index ``J`` of ``eos`` (the last real position) of each right-padded sentence, ``[B]`` float."""
    return (~padding_mask).sum(1).to(torch.float32) - 1


def gaussian(offset: Tensor, sigma: float) -> Tensor:
    """``exp(-offset² / 2σ²)``."""
    return torch.exp(-offset.pow(2) / (2.0 * sigma * sigma))


class PositionPredictor(nn.Module):
    """Predicted source position ``p_i = J · sigmoid(vᵀ tanh(W_p h_i))`` (Chen et al. eq. 5,
    Luong et al. eq. 9), with ``J`` the index of ``eos`` (see the module docstring)."""

    def __init__(self, query_dim: int, hidden_dim: Optional[int] = None):
        super().__init__()
        hidden_dim = hidden_dim or query_dim
        self.proj = nn.Linear(query_dim, hidden_dim, bias=False)
        self.v = nn.Linear(hidden_dim, 1, bias=False)

    def forward(self, hidden: Tensor, last_position: Tensor) -> Tensor:
        """``[B, H]`` decoder state, ``[B]`` eos index -> ``[B]`` real-valued positions."""
        logit = self.v(torch.tanh(self.proj(hidden))).squeeze(-1)
        return last_position.to(logit.dtype) * torch.sigmoid(logit)


BEFORE_GAUSSIAN = "attn_before_gaussian"  # the decoder's extra: local-p's window softmax


def local_p_weights(scores: Tensor, position: Tensor, padding_mask: Tensor, window: float,
                    sigma: Optional[float] = None,
                    extras: Optional[Dict[str, Tensor]] = None) -> Tensor:
    """Luong et al. (2015) local-p weights (Chen et al. eqs. 6-7).

    ``a_ij = softmax_{k ∈ W_i}(e_ik)_j · exp(-(j - p_i)² / 2σ²)`` for ``j`` in the window
    ``W_i = {j real : |j - p_i| <= D}`` (the integer positions of ``[p_i - D, p_i + D]``),
    ``0`` outside it. ``σ = D / 2`` by default. As in Luong, the softmax runs over the
    window only and the Gaussian multiplies the normalised weights, so the weights sum
    to at most 1; ``p_i`` gets its gradient through the Gaussian. The window is never
    empty: the nearest integer to ``p_i ∈ [0, J]`` is a real position within ``0.5 <= D``.

    ``scores`` ``[B, S]``, ``position`` ``[B]``, ``padding_mask`` ``[B, S]`` -> ``[B, S]``.
    ``extras`` (a dict) receives ``extras[BEFORE_GAUSSIAN]``: the window softmax before
    the Gaussian, a distribution over the source positions (what supervised attention
    supervises).
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


def distance_row(distances: Tensor, position: Tensor, last_position: Tensor,
                 interpolate: bool = True) -> Tensor:
    """The syntax-distance row ``M[p_i]`` (Chen et al. eq. 9) at a real-valued position.

    ``interpolate=True``: ``(1 - t) · M[f] + t · M[c]`` with ``f = ⌊p_i⌋``,
    ``c = min(f + 1, J)`` and ``t = p_i - f``, piecewise linear in ``p_i``, so ``p_i``
    (and the predictor behind it) gets a gradient through the Gaussian of eq. 10.
    ``interpolate=False``: the row of the nearest position ``⌊p_i + 1/2⌋``, as an integer
    index would give; then ``p_i`` gets no gradient at all.

    ``distances`` ``[B, S, S]`` (long, padding rows/columns ``PAD_DISTANCE``), ``position``
    and ``last_position`` ``[B]`` -> ``[B, S]`` float. ``f`` and ``c`` are always real
    positions, so padding columns stay at ``PAD_DISTANCE``.
    """
    bsz, src_len = distances.shape[:2]
    last = last_position.to(torch.long).unsqueeze(1)

    def rows(index: Tensor) -> Tensor:
        """``[B, k]`` row indices (clamped to the real positions) -> ``[B, k, S]`` float rows."""
        index = torch.minimum(index, last).clamp(min=0)
        return distances.gather(1, index.unsqueeze(2).expand(-1, -1, src_len)).float()

    position = position.float().unsqueeze(1)
    if not interpolate:
        return rows(torch.floor(position + 0.5).long()).squeeze(1)
    floor = torch.floor(position).detach().long()  # p <= J, so ⌊p⌋ is a real position
    frac = position - floor.float()
    both = rows(torch.cat([floor, floor + 1], dim=1))  # one gather for ⌊p⌋ and ⌈p⌉
    return both[:, 0] + frac * (both[:, 1] - both[:, 0])


GAUSSIAN_READINGS = ("scores", "weights")
"""The two readings of the Gaussian of Chen et al. eq. 10 (see :func:`syntax_directed_weights`)."""

DEFAULT_GAUSSIAN_READING = "scores"
"""The reading the ``syntax_directed_rnn`` models use unless ``--syntax-gaussian`` says
otherwise, chosen by measurement (issue 15 item 1): ``sdatt_double_syntax`` on the
synthetic generalisation split, 3 seeds at 2,400 updates (docs/RESULTS.md), gives
agreement 98.1 ± 0.6 % with ``scores`` against 74.2 ± 23.2 % with ``weights`` (backbone
74.0 ± 22.5 %), gen BLEU 43.4 ± 4.5 against 40.4 ± 6.3, AER 15.3 ± 2.9 against 24.1 ± 8.5."""


def syntax_directed_weights(scores: Tensor, row: Tensor, padding_mask: Tensor, max_distance: float,
                            sigma: Optional[float] = None,
                            gaussian_on: str = DEFAULT_GAUSSIAN_READING) -> Tensor:
    """Syntax-directed weights of Chen et al. (2017), eqs. 10-11, in one of two readings.

    ``gaussian_on="scores"``, eq. 10 as written: ``e^s_ij = e_ij · exp(-M[p_i][j]² / 2σ²)``,
    then ``a_i = softmax_{N_i}(e^s_i)`` (eq. 11). The Gaussian pulls a score towards 0,
    which *raises* a negative score, so among words with equal negative scores the
    farther ones get more weight (scores -2, -2 at distances 0, 4 with σ = 2 give
    weights 0.15, 0.85).

    ``gaussian_on="weights"``, the reading of the paper's text ("the greater the
    distance ... the smaller ... contribute") and of Luong's local-p, which SDAtt
    extends: the Gaussian multiplies the normalised weights, renormalised over ``N_i``,
    i.e. ``a_i = softmax_{N_i}(e_i - M[p_i]² / 2σ²)``, so
    ``a_ij / a_ik = exp(e_ij - e_ik) · G_ij / G_ik`` whatever the signs of the scores.

    The softmax runs over the syntax neighbourhood ``N_i = {j real : M[p_i][j] <= n}``,
    ``0`` outside it, so the weights sum to 1. ``σ = n / 2`` by default.

    With an interpolated row (see :func:`distance_row`) ``N_i`` is the set of real
    positions whose *interpolated* distance is ``<= n``; positions at the row's smallest
    distance are always in ``N_i``. That minimum is ``0`` for an integer row; for an
    interpolated one it is reached at ``⌊p_i⌋`` or ``⌈p_i⌉`` (and, in a tie, along the tree
    path between them) and exceeds ``n`` only when those two are more than ``2n`` arcs
    apart; keeping it means ``N_i`` is never empty.

    ``scores`` ``[B, S]``, ``row`` ``[B, S]`` float, ``padding_mask`` ``[B, S]`` -> ``[B, S]``.
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

    def __init__(self, query_dim: int, window: float = 10.0, sigma: Optional[float] = None):
        super().__init__()
        self.predictor = PositionPredictor(query_dim)
        self.window = float(window)
        self.sigma = sigma

    def forward(self, hidden: Tensor, scores: Tensor, encoder_out: Dict[str, Tensor],
                state: Dict[str, Tensor], extras: Optional[Dict[str, Tensor]] = None) -> Tensor:
        position = self.predictor(hidden, state["last_position"])
        return local_p_weights(scores, position, encoder_out["padding_mask"], self.window, self.sigma,
                               extras)


class SyntaxDirectedWeights(nn.Module):
    """Syntax-directed weights (Chen et al. 2017) with their own position predictor.

    Reads ``encoder_out["src_distances"]`` ``[B, S, S]`` (the ``syntax_translation`` task
    provides it when the model declares ``distances`` in its ``side_inputs``).

    ``interpolate=True`` (the default) takes ``M[p_i]`` by linear interpolation between the
    rows of ``⌊p_i⌋`` and ``⌈p_i⌉``; the neighbourhood is then the positions whose
    interpolated distance is ``<= n`` (see :func:`syntax_directed_weights`). Why: the
    paper indexes ``M`` with the real-valued ``p_i`` without saying how; with an integer
    row (``interpolate=False``, the nearest position) every quantity is a step function of
    ``p_i``, so the predictor ``W_p, v`` of eq. 5 gets no gradient and stays at its random
    initialisation. Interpolation makes the Gaussian of eq. 10 piecewise linear in ``p_i``
    and the predictor learns; at an integer ``p_i`` both agree.

    ``gaussian_on`` picks the reading of eq. 10's Gaussian (:data:`GAUSSIAN_READINGS`):
    ``"scores"`` multiplies the *score* by it, as eq. 10 is written (a far word's negative
    score is pulled towards 0, i.e. raised); ``"weights"`` multiplies the normalised
    weights by it and renormalises, as the paper's text and Luong's local-p do (see
    :func:`syntax_directed_weights`). Default :data:`DEFAULT_GAUSSIAN_READING`.
    """

    def __init__(self, query_dim: int, max_distance: float = 4.0, sigma: Optional[float] = None,
                 interpolate: bool = True, gaussian_on: str = DEFAULT_GAUSSIAN_READING):
        super().__init__()
        if gaussian_on not in GAUSSIAN_READINGS:
            raise ValueError(f"--syntax-gaussian must be one of {', '.join(GAUSSIAN_READINGS)}, "
                             f"got {gaussian_on!r}")
        self.predictor = PositionPredictor(query_dim)
        self.max_distance = float(max_distance)
        self.sigma = sigma
        self.interpolate = interpolate
        self.gaussian_on = gaussian_on

    def extra_repr(self) -> str:
        return (f"max_distance={self.max_distance}, sigma={self.sigma}, "
                f"interpolate={self.interpolate}, gaussian_on={self.gaussian_on!r}")

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
        position = self.predictor(hidden, last)
        row = distance_row(distances, position, last, self.interpolate)
        return syntax_directed_weights(scores, row, encoder_out["padding_mask"], self.max_distance, self.sigma,
                                       self.gaussian_on)


class LocalAttentionLayer(GlobalAttentionLayer):
    """Single-context attentional layer with local-p (Luong et al. 2015) or syntax-directed
    (SDAtt, Chen et al. 2017, eqs. 5-13) weights.

    ``e = score(h_t, h̄)`` (Luong), ``a = local_weights(h_t, e)``, ``c = Σ_j a_j h̄_j``,
    ``h̃_t = tanh(W_c [c; h_t])``, which feeds the output layer and input feeding. The
    weights returned are the ones that made the context (for local-p they sum to at most 1,
    see :func:`local_p_weights`). The state adds ``last_position`` (the eos index ``J``).
    Local-p also puts its window softmax (a distribution over the source positions) in
    the returned state as ``"extra." + BEFORE_GAUSSIAN``, which the decoder returns as
    ``extra[BEFORE_GAUSSIAN]`` (see :class:`~fairseq_syntax.modules.rnn_decoder.RNNDecoder`).
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
