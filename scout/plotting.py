"""How the report's figures look: matplotlib without a display, every curve told apart in colour and
in greyscale (its own marker and line style), legends outside the data, bands for the spread, and
each figure written as PDF (for the LaTeX report) and PNG (for the HTML page)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

# (colour, marker, line style): distinguishable in colour and in greyscale
STYLES = [
    ("#1f5fa8", "o", "-"),
    ("#b5651d", "s", "--"),
    ("#2e8b57", "^", "-."),
    ("#7b3fa0", "D", ":"),
    ("#444444", "v", (0, (5, 1))),
    ("#c23b22", "P", (0, (3, 1, 1, 1))),
    ("#888888", "X", (0, (1, 1))),
]


def style(i: int) -> dict:
    colour, marker, ls = STYLES[i % len(STYLES)]
    return {"color": colour, "marker": marker, "ls": ls, "ms": 4}


def save(fig, out_dir: Path, name: str, caption: str, legend_outside: bool = True) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    # no creation date in the PDF: a report rendered again from the same cache is the same bytes
    fig.savefig(out_dir / f"{name}.pdf", bbox_inches="tight", metadata={"CreationDate": None})
    fig.savefig(out_dir / f"{name}.png", dpi=150, bbox_inches="tight")
    plt.close(fig)
    return {"name": name, "pdf": f"{name}.pdf", "png": f"{name}.png", "caption": caption}


def legend(ax, handles=None, labels=None) -> None:
    """The legend beside the axes, where it never covers a curve: to the right, or below them when a
    twin axis holds the right side (its ticks and label)."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    twinned = any(
        other is not ax and other.get_position().bounds == ax.get_position().bounds for other in ax.figure.axes
    )
    if twinned:
        ax.legend(handles, labels, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
    else:
        ax.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)


def band(ax, x, mean, spread, style: dict, label: str) -> None:
    ax.plot(x, mean, label=label, **style)
    if spread is not None and np.isfinite(spread).any():
        ax.fill_between(x, mean - spread, mean + spread, color=style["color"], alpha=0.15, lw=0)
