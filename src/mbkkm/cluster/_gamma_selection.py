"""The result of gamma="auto": what the selection tried, its choice, and a plot of it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._core._width import MIN_GAIN, MIN_GAIN_WIDER, choose_width
from .._validation import require


class GammaGridWarning(UserWarning):
    """gamma="auto" chose a width at an end of its (extended) candidate grid.

    The criterion may keep decreasing beyond the widths tried: pass the width as
    a number, or explore further with :func:`mbkkm.cluster.select_gamma`'s
    ``multipliers``.
    """


@dataclass(frozen=True)
class GammaSelection:
    """What ``gamma="auto"`` tried and why it chose its width.

    Attributes
    ----------
    gamma : float
        The chosen width.
    candidates : ndarray of shape (n_candidates,)
        The widths tried, increasing (the grid, extended where the choice lay at
        one of its ends).
    scores : ndarray of shape (n_candidates,)
        The criterion of each candidate (lower is better).
    criterion : str
        Name of the criterion (``"knn-normalized-cut"``).
    base_gamma : float
        The base width the candidates are multiples of (the mean-distance width
        of the sample).
    n_samples : int
        Size of the sample the criterion was computed on.
    seed_scores : ndarray of shape (n_candidates, n_seeds + 1)
        The normalised cut of the partition of each candidate and run: the
        ``n_seeds`` kernel k-means runs from k-means++, then the kernel k-means run
        from the spectral partition (:func:`spectral_partition`; the column is
        absent when k = 1 or k = n_samples).
    sample_indices : ndarray of shape (n_samples,)
        The rows of X in the sample, increasing.
    sample_labels : ndarray of shape (n_samples,)
        The chosen width's solution on the sample (see ``raw_scores``): the
        estimators start from it.
    seed_inertia : ndarray of shape (n_candidates, n_seeds + 1)
        The kernel k-means objective of each run on the sample (columns as
        ``seed_scores``).
    raw_scores : ndarray of shape (n_candidates,)
        The cut of each candidate's solution: its lowest-objective run, or the run
        from the spectral start when that one's cut is lower (``solution_runs``);
        ``scores`` is ``raw_scores`` smoothed over the grid (:func:`smooth_scores`).
    solution_runs : ndarray of shape (n_candidates,)
        The column of ``seed_scores`` that is each candidate's solution.
    seconds : float
        Wall-clock time of the selection.
    reference : int or None
        Index in ``candidates`` of the mean-distance width (multiplier 1), which
        is kept unless another candidate is better (a narrower one: clearly
        better); None when the grid does not hold it (then the lowest score wins).
    min_gain : float
        The relative margin of that guard for the narrower candidates (larger
        gamma): one wins only when its score is at most
        ``(1 - min_gain) * scores[reference]`` (:attr:`threshold`).
    min_gain_wider : float
        The same margin for the wider candidates (smaller gamma; 0: a lower score
        suffices; :attr:`threshold_wider`).
    at_edge : {"narrowest", "widest"} or None
        Set when the chosen width is the narrowest or the widest candidate even
        after the grid was extended (a :class:`GammaGridWarning` said so).
    start_from_partition : bool
        Whether the estimators start the fit from ``sample_labels`` (with a named
        ``init``): when the chosen width's score is at most ``(1 - min_gain)``
        times the reference's (clearly better; every narrower choice is), or
        without a reference. Otherwise the fit starts from ``init`` (k-means++),
        as a fit at that fixed width does
        (:func:`mbkkm._core._width.trust_partition`).
    noise : ndarray of shape (n_candidates,) or None
        The standard error of each score, from the spread of the cuts of its
        width's runs (``seed_scores``; :func:`mbkkm._core._width.score_noise`).
    noise_margin : float
        A wider candidate had to lie below the reference's score by more than this
        many standard errors of the difference, ``noise_margin * sqrt(noise[i]**2 +
        noise[reference]**2)``.
    data_width : bool
        True when the mean-distance width was kept and ``gamma`` (and
        ``candidates[reference]``) is that width computed on all of X, the width
        ``gamma="mean-distance"`` uses; the criterion at that candidate was
        computed at its sample estimate ``base_gamma``.
    """

    gamma: float
    candidates: np.ndarray
    scores: np.ndarray
    criterion: str
    base_gamma: float
    n_samples: int
    seed_scores: np.ndarray | None = field(repr=False, default=None)
    sample_indices: np.ndarray | None = field(repr=False, default=None)
    sample_labels: np.ndarray | None = field(repr=False, default=None)
    seed_inertia: np.ndarray | None = field(repr=False, default=None)
    seconds: float | None = field(repr=False, default=None)
    raw_scores: np.ndarray | None = field(repr=False, default=None)
    solution_runs: np.ndarray | None = field(repr=False, default=None)
    reference: int | None = field(repr=False, default=None)
    min_gain: float = field(repr=False, default=MIN_GAIN)
    min_gain_wider: float = field(repr=False, default=MIN_GAIN_WIDER)
    at_edge: str | None = field(repr=False, default=None)
    start_from_partition: bool = field(repr=False, default=True)
    noise: np.ndarray | None = field(repr=False, default=None)
    noise_margin: float = field(repr=False, default=0.0)
    data_width: bool = field(repr=False, default=False)

    @property
    def multipliers(self):
        """candidates / base_gamma."""
        return self.candidates / self.base_gamma

    @property
    def plausible_range(self):
        """``(low, high)``: the smallest and largest candidate widths whose score the
        criterion cannot tell from the chosen width's.

        Candidate i is counted when its score lies within one standard error of the
        difference, ``|scores[i] - scores[best]| <= sqrt(noise[i]**2 +
        noise[best]**2)`` (``noise``: the scores' run-to-run standard errors), the
        chosen width included. A range of one candidate, or of neighbours, says the
        choice is sharp; a wide one says the criterion is flat there and another
        ``random_state`` (another sample, other runs) may choose anywhere in it. It
        does not count the sample's own variation, so seeds can spread further:
        on standardised digits (k = 10, 10 seeds) the chosen widths spanned
        0.03-1x the mean-distance width (34x), each seed's range about 0.1-8x
        (64-256x wide; ``docs/gamma.md``). None without ``noise``.
        """
        if self.noise is None:
            return None
        best = int(np.flatnonzero(self.candidates == self.gamma)[0])
        se = np.sqrt(np.asarray(self.noise) ** 2 + float(self.noise[best]) ** 2)
        near = np.abs(np.asarray(self.scores) - float(self.scores[best])) <= se
        near[best] = True
        return float(self.candidates[near].min()), float(self.candidates[near].max())

    @property
    def threshold(self):
        """The score a narrower candidate (larger gamma) must reach to replace the
        reference width (``(1 - min_gain) * scores[reference]``; None without a
        reference)."""
        if self.reference is None:
            return None
        return (1.0 - self.min_gain) * float(self.scores[self.reference])

    @property
    def threshold_wider(self):
        """The same for a wider candidate (smaller gamma): ``(1 - min_gain_wider) *
        scores[reference]``, and strictly below ``scores[reference]``."""
        if self.reference is None:
            return None
        return (1.0 - self.min_gain_wider) * float(self.scores[self.reference])

    def table(self):
        """A text table of the candidates and their scores, the choice marked."""
        lines = [
            f"gamma=auto ({self.criterion}, lower is better; sample of "
            f"{self.n_samples} points, base width {self.base_gamma:.4g})",
            f"{'gamma':>12} {'x base':>8} {'score':>9}",
        ]
        for i, (g, m, s) in enumerate(zip(self.candidates, self.multipliers, self.scores)):
            marks = []
            if i == self.reference:
                marks.append("mean-distance width")
            if g == self.gamma:
                marks.append("<- chosen")
            row = f"{g:12.5g} {m:8.3g} {s:9.4f}"
            lines.append(row + ("  " + ", ".join(marks) if marks else ""))
        if self.reference is not None:
            s_ref = self.scores[self.reference]
            wider = (
                "a wider width (smaller gamma) replaces the mean-distance width with "
                f"a score < {s_ref:.4g}"
            )
            if self.min_gain_wider > 0:
                wider += f" and <= {1 - self.min_gain_wider:g} x it = {self.threshold_wider:.4g}"
            if self.noise is not None and self.noise_margin > 0:
                wider += (
                    f", lower by more than {self.noise_margin:g} standard errors of "
                    f"the difference (the scores' standard errors: noise)"
                )
            lines.append(wider)
            lines.append(
                f"a narrower width (larger gamma) only with a score "
                f"<= {1 - self.min_gain:g} x {s_ref:.4g} = {self.threshold:.4g}"
            )
        best = int(np.flatnonzero(self.candidates == self.gamma)[0])
        rule = (self.min_gain, self.min_gain_wider, self.noise, self.noise_margin)
        plateau = self.raw_scores is not None and best != self.reference
        if plateau and best != choose_width(self.scores, self.reference, *rule):
            lines.append(
                "the lowest scores lie on a plateau of equal cuts at the end of the "
                "grid: its innermost width is chosen"
            )
        if self.data_width:
            lines.append(
                "the mean-distance width is kept: gamma is that width of all the "
                "data (gamma='mean-distance'), its candidate above"
            )
        if self.at_edge is not None:
            lines.append(
                f"the choice is the {self.at_edge} width tried: the best width may "
                f"lie beyond the grid"
            )
        spread = self.plausible_range
        if spread is not None and spread[1] > spread[0]:
            lines.append(
                f"within one standard error of the chosen score: widths {spread[0]:.4g} "
                f"to {spread[1]:.4g} ({spread[1] / spread[0]:.3g}x; plausible_range): "
                f"another random_state may choose any of them"
            )
        lines.append(
            "the fit starts from the chosen width's sample partition"
            if self.start_from_partition
            else "the fit starts from init (k-means++): the chosen width's score is not "
            "clearly (by min_gain) below the mean-distance width's"
        )
        return "\n".join(lines)

    def summary(self):
        """The choice in one line (:meth:`table` has the candidates and the rules).

        Says plainly when every candidate scored the same (well-separated clusters:
        every width cuts them alike, all scores 0), and when the chosen score is
        shared by other widths.
        """
        n, scores = len(self.candidates), np.asarray(self.scores, dtype=np.float64)
        best = int(np.flatnonzero(self.candidates == self.gamma)[0])
        tied = np.isclose(scores, scores[best], rtol=1e-9, atol=1e-12)
        sample = f"on a {self.n_samples}-point sample"
        if tied.all():
            kept = "the mean-distance width"
            if best != self.reference:
                kept = f"{self.multipliers[best]:.3g} x {kept}"
            line = (
                f"gamma=auto: all {n} widths tried tie ({self.criterion} "
                f"{scores[best]:.4g} each {sample}): no width separates the clusters "
                f"better than another; kept {kept}, gamma = {self.gamma:.4g}"
            )
        elif best == self.reference:
            line = (
                f"gamma=auto kept the mean-distance width, gamma = {self.gamma:.4g}: "
                f"none of the other {n - 1} widths tried scored clearly lower "
                f"({self.criterion} {scores[best]:.4g} {sample}, lower is better)"
            )
        else:
            ref = ""
            if self.reference is not None:
                ref = f" against {scores[self.reference]:.4g} at the mean-distance width"
            also = int(tied.sum()) - 1
            line = (
                f"gamma=auto chose gamma = {self.gamma:.4g}, "
                f"{self.multipliers[best]:.3g} x the mean-distance width: "
                f"{self.criterion} {scores[best]:.4g}{ref} ({n} widths tried {sample}"
                + (f"; {also} other{'s' if also > 1 else ''} tie with it" if also else "")
                + ")"
            )
        if self.at_edge is not None:
            line += f"; the {self.at_edge} width tried, the best may lie beyond"
        return line

    def plot(self, ax=None):
        """The criterion against gamma (log axis), the choice marked. Returns the Axes."""
        ax = plot_criterion(self.candidates, self.scores, self.gamma, "gamma", self.criterion, ax)
        ax.axvline(self.base_gamma, color="0.6", ls=":", label="mean-distance width")
        if self.reference is not None:
            lo, hi = self.candidates[0], self.candidates[-1]
            for level, start, stop, ls, gain, side in (
                (self.threshold_wider, lo, self.base_gamma, "-.", self.min_gain_wider, "wider"),
                (self.threshold, self.base_gamma, hi, "--", self.min_gain, "narrower"),
            ):
                label = f"{1 - gain:g} x its score ({side} widths)"
                ax.hlines(level, start, stop, color="0.6", ls=ls, lw=0.8, label=label)
        ax.set_xlabel("gamma")
        ax.legend(fontsize="small")
        return ax


def plot_criterion(candidates, scores, chosen, name, criterion, ax=None):
    """Draw a selection's criterion against its parameter (log axis), the choice marked.

    Shared by the width selection (gamma) and the heat kernel's choice of t.

    Parameters
    ----------
    candidates, scores : ndarray of shape (n_candidates,)
    chosen : float
        The chosen candidate (one of ``candidates``).
    name : str
        The parameter's name in the legend ("gamma", "t").
    criterion : str
        The criterion's label.
    ax : matplotlib Axes, optional
        Drawn on a new figure when None.

    Returns
    -------
    ax : matplotlib Axes
    """
    if ax is None:
        plt = require("matplotlib.pyplot", "plot", "plot")
        _, ax = plt.subplots(figsize=(5, 3.2), layout="constrained")
    ax.semilogx(candidates, scores, "o-", color="C0", label=criterion)
    best = int(np.flatnonzero(candidates == chosen)[0])
    label = f"chosen {name} = {chosen:.3g}"
    ax.semilogx([chosen], [scores[best]], "o", ms=12, mfc="none", color="C3", label=label)
    ax.set_ylabel("normalised k-NN cut (lower is better)")
    return ax
