"""What every section draws with: escaping, percentages, figures as inline PNGs, colours, the page style."""

from __future__ import annotations

import base64
import html
import io


def _png(fig, dpi: int = 80) -> str:
    """A matplotlib figure as an <img> with a data URI."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode()
    return f'<img alt="figure" src="data:image/png;base64,{data}">'


# In place of a figure in a report written without figures (make_plots false: matplotlib's drawing is most of a
# report's cost, ~0.5-1 s a run)
NO_FIGURE = (
    "<p><i>Not drawn: the run's make_plots is false. <code>python -m tinygrpo.run.report RUN_DIR</code> writes the "
    "report again with its figures, from the run's logs.</i></p>"
)


def _e(x) -> str:
    return html.escape(str(x))


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _colour(reward) -> str:
    """Red (0) to green (1) for a reward; grey when there is none."""
    if reward is None:
        return "#ddd"
    r = min(max(float(reward), 0.0), 1.0)
    return f"rgb({int(235 - 120 * r)},{int(150 + 85 * r)},{int(150 - 20 * r)})"


def _diverging(a: float, scale: float) -> str:
    """Blue for a positive advantage, red for a negative one, white for 0; full colour at |a| = scale."""
    t = min(abs(a) / scale, 1.0) if scale > 0 else 0.0
    end = (90, 140, 240) if a > 0 else (235, 90, 90)
    r, g, b = (round(255 + (e - 255) * t) for e in end)
    return f"rgb({r},{g},{b})"


STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1250px;color:#222}
h1{margin-bottom:0}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #ddd;padding:.2em .5em;text-align:left}
pre{background:#f4f4f4;padding:.6em;white-space:pre-wrap}img{max-width:100%}
table.groups td{min-width:4.5em;text-align:center}nav a{margin-right:1em}
.tok{font-family:monospace;font-size:110%;white-space:pre;padding:.1em .15em;margin:0 1px;border:1px solid #ddd}
.tool{background:#eee;color:#555;font-style:italic;border:1px dashed #888}
"""
