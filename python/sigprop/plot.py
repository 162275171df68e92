"""sigprop.plot: per-layer traces drawn with matplotlib (docs/python.md, "Plots").

matplotlib is optional: it is imported when plot() is called. This module
only arranges the numbers of the C++ traces; it computes none.
"""

import math

import numpy as np

# Correlations are drawn on a fixed linear axis, [0, 1] (or [-1, 1] when a
# value is negative); variances (column names ending in "var") on a log axis
# when the values drawn are positive and span more than a decade; everything
# else linear, autoscaled.
_CORRELATIONS = ("corr_len", "corr_dim", "grad_corr_len")
_NOT_QUANTITIES = ("layer", "outside_domain")


def _is_correlation(quantity):
    return quantity.removeprefix("mid_") in _CORRELATIONS


def _series(traces, labels):
    """(label, trace-like, position index or None) for each line of a panel."""
    from . import BatchTrace, PositionTrace, Trace

    if isinstance(traces, (Trace, BatchTrace, PositionTrace)):
        items = [(None, traces)]
    elif isinstance(traces, dict):
        items = list(traces.items())
    elif isinstance(traces, (list, tuple)):
        items = [(None if len(traces) == 1 else f"model {i + 1}", t) for i, t in enumerate(traces)]
    else:
        raise TypeError("sigprop.plot takes a Trace, BatchTrace or PositionTrace, or a list or dict of them, "
                        f"not {type(traces).__name__}")
    series = []
    for label, item in items:
        prefix = "" if label is None else f"{label}, "
        if isinstance(item, Trace):
            series.append((label, item, None))
        elif isinstance(item, BatchTrace):
            series += [(f"{prefix}config {i}", t, None) for i, t in enumerate(item)]
        elif isinstance(item, PositionTrace):
            series += [(f"{prefix}position {p}", item, j) for j, p in enumerate(item.position)]
        else:
            raise TypeError(f"sigprop.plot: {type(item).__name__} is not a Trace, BatchTrace or PositionTrace")
    if not series:
        raise ValueError("sigprop.plot: no traces to plot")
    if labels is not None:
        labels = list(labels)
        if len(labels) != len(series):
            raise ValueError(f"sigprop.plot: {len(labels)} labels for {len(series)} lines")
        series = [(label, t, j) for label, (_, t, j) in zip(labels, series)]
    return series


def _values(trace, position, quantity):
    values = getattr(trace, quantity)
    return values if position is None else values[:, position]


def plot(traces, quantities=("var", "grad_var", "corr_len"), *, labels=None, ax=None, figure=None, path=None,
         title=None):
    """Draw per-layer quantities of one or more traces; returns the
    matplotlib Figure.

    traces: a Trace, a BatchTrace (one line per configuration, "config i"),
    a PositionTrace (one line per position, "position p"), or a list of them
    (labelled "model 1", ...) or a dict label -> them. quantities: column
    names (var, grad_var, corr_len, mid_var, ...; the columns every trace
    has), one panel each, x the layer. Variances (names ending in "var")
    are drawn on a log axis when their values are positive and span more
    than a decade, correlations (corr_len, corr_dim, grad_corr_len, with
    mid_) on [0, 1] ([-1, 1] when one is negative), the rest linear. labels: one per line, replacing the
    defaults. ax: an Axes, or one per quantity, to draw into, or figure: a
    Figure to add the panels to (default a new pyplot figure). path: where
    to save the figure (format from the suffix).
    """
    try:
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise ImportError("sigprop.plot needs matplotlib (Debian: apt-get install python3-matplotlib; "
                          "or pip install matplotlib)") from error

    quantities = [quantities] if isinstance(quantities, str) else list(quantities)
    if not quantities:
        raise ValueError("sigprop.plot: no quantities to plot")
    series = _series(traces, labels)
    valid = [c for c in series[0][1].columns if c not in _NOT_QUANTITIES]
    valid = [c for c in valid if all(c in t.columns for _, t, _ in series)]
    for q in quantities:
        if q not in valid:
            raise ValueError(f"sigprop.plot: unknown quantity {q!r} (valid: {', '.join(valid)})")

    if ax is not None:
        if figure is not None:
            raise ValueError("sigprop.plot: give ax or figure, not both")
        axes = list(np.ravel(ax))
        if len(axes) != len(quantities):
            raise ValueError(f"sigprop.plot: {len(axes)} axes for {len(quantities)} quantities")
        figure = axes[0].figure
    else:
        columns = min(len(quantities), 3)
        rows = math.ceil(len(quantities) / columns)
        if figure is None:
            figure = plt.figure(figsize=(4.5 * columns, 3.6 * rows), layout="constrained")
        axes = list(figure.subplots(rows, columns, squeeze=False).ravel())
        for extra in axes[len(quantities):]:
            extra.remove()

    for panel, quantity in zip(axes, quantities):
        drawn = []
        for label, t, position in series:
            y = _values(t, position, quantity)
            panel.plot(np.arange(len(y)), y, label=label)
            drawn.append(y[np.isfinite(y)])
        drawn = np.concatenate(drawn)
        if _is_correlation(quantity):
            low = -1 if drawn.size and drawn.min() < 0 else 0
            panel.set_ylim(low - 0.02, 1.02)
        elif quantity.endswith("var") and drawn.size and drawn.min() > 0 and drawn.max() > 10 * drawn.min():
            panel.set_yscale("log")
        panel.set_xlabel("layer n")
        panel.set_title(quantity)
        panel.grid(True, alpha=0.3)
    if any(label is not None for label, _, _ in series):
        axes[0].legend(fontsize="small")
    if title is not None:
        figure.suptitle(title)
    if path is not None:
        figure.savefig(path, dpi=120)
    return figure
