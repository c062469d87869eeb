"""The one plot the benchmarks under tools/ draw: recall against queries per second, one annotated curve per index."""


def plot_recall_speed(curves, path, *, xlabel, ylabel, title):
    """Write a PNG of ``curves`` to ``path``: each curve is ``(label, color, marker, points)`` with points
    ``(queries_per_second, recall, annotation or None)``; the speed axis is logarithmic (settings span decades)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, color, marker, points in curves:
        points = sorted(points)
        ax.plot([p[0] for p in points], [p[1] for p in points], marker=marker, color=color, label=label)
        for qps, recall, note in points:
            if note is not None:
                ax.annotate(note, (qps, recall), textcoords="offset points", xytext=(4, -10), fontsize=7, color=color)
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
