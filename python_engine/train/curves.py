"""Loss curves as PNG (matplotlib, headless Agg backend)."""

from __future__ import annotations

from pathlib import Path


def plot_curves(path: Path, title: str, series: dict[str, tuple[list, list]], ylabel: str = "loss (nats/token)",
                log_y: bool = False) -> Path | None:
    """series: label -> (steps, values). Writes one PNG and returns its path (None, with a
    warning, where matplotlib is missing: a finished training run must not fail on a plot)."""
    try:
        import matplotlib
    except ImportError:
        print(f"warning: matplotlib is not installed; skipping {path.name}", flush=True)
        return None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for label, (xs, ys) in series.items():
        if xs:
            ax.plot(xs, ys, label=label, marker="o" if len(xs) < 30 else None, markersize=3, linewidth=1.2)
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    if log_y:
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
