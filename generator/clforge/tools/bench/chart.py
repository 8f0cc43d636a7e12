"""The ratio table as a PNG: one group of bars per case (clforge over each peer, the median of
the rounds' ratios, with their range as an error bar; pale where that range crosses 1), a line
at 1.0 and a log axis, with the commit and the device in the title (matplotlib, Agg backend)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from clforge.tools.bench.report import Row

COLORS = {"numpy": "#4c72b0", "onnxruntime": "#dd8452", "clblast": "#55a868"}


def write_chart(
    path: Path, rows: Sequence[Row], peers: Sequence[tuple[str, str]], title: str
) -> str | None:
    """Write the chart of the rows' ratios over `peers` ((key, title) pairs); None when
    written, else why not (matplotlib missing, nothing to plot)."""
    try:
        import matplotlib
    except ImportError:
        return "matplotlib not installed (pip install matplotlib)"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator

    shown = [(k, t) for k, t in peers if any(r["spreads"].get(k) for r in rows)]
    if not shown:
        return "no peer gave a figure"
    width = 0.8 / len(shown)
    fig, ax = plt.subplots(figsize=(max(10.0, 0.42 * len(rows) + 2), 6.5), layout="constrained")
    for j, (key, peer) in enumerate(shown):
        offset = (j - (len(shown) - 1) / 2) * width
        spreads = [(i + offset, s) for i, r in enumerate(rows) if (s := r["spreads"].get(key))]
        xs, ys = [x for x, _ in spreads], [s["median"] for _, s in spreads]
        # bars grow from the line at 1: up where clforge is faster, down where it is slower;
        # a ratio whose rounds fall on both sides of 1 (level) is drawn pale
        heights = [y - 1.0 for y in ys]
        alphas = [0.35 if s["level"] else 1.0 for _, s in spreads]
        bars = ax.bar(xs, heights, width, bottom=1.0, label=f"x{peer}", color=COLORS.get(key))
        for bar, alpha in zip(bars, alphas, strict=True):
            bar.set_alpha(alpha)
        # the rounds' range of each ratio
        low = [y - s["range"][0] for y, (_, s) in zip(ys, spreads, strict=True)]
        high = [s["range"][1] - y for y, (_, s) in zip(ys, spreads, strict=True)]
        ax.errorbar(xs, ys, yerr=[low, high], fmt="none", ecolor="black", elinewidth=0.6)
    ax.axhline(1.0, color="black", linewidth=1)
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.set_xticks(range(len(rows)), [r["label"] for r in rows], rotation=60, ha="right")
    ax.set_xlim(-0.6, len(rows) - 0.4)
    ax.set_ylabel("clforge speed / peer speed (above 1: clforge faster; pale: level)")
    ax.grid(axis="y", which="both", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title(title, fontsize=11)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None
