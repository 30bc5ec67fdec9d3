"""Plotting and tables: every figure names the GPU it was measured on, and says when it is a replay."""
from __future__ import annotations

import html
import re

import matplotlib.pyplot as plt


def text(value) -> str:
    """A value (a recorded one, or a label made of them) as HTML text that shows as itself: markup escaped once. A
    value replay.plain escaped already is not escaped again, which would show as &amp;lt;."""
    return html.escape(html.unescape(str(value)), quote=False)


def md(value) -> str:
    """A value as Markdown text that shows as itself: on one line (a line break could start a block), its markup
    escaped (`text`), and the marks that make links, code spans and table cells backslashed."""
    return re.sub(r"([\\`\[\]|])", r"\\\1", text(" ".join(str(value).split())))


def code(value) -> str:
    """A value as a Markdown code span, on one line: its fence is longer than any run of backticks in it, so the
    value cannot close the span and leave the rest as Markdown (inside a span, markup shows as text)."""
    value = " ".join(str(value).split())
    fence = "`" * (max((len(r) for r in re.findall(r"`+", value)), default=0) + 1)
    return f"{fence} {value} {fence}" if "`" in value else f"{fence}{value}{fence}"


def short(label: str) -> str:
    """'NVIDIA H100 80GB HBM3, replayed from ...' -> 'NVIDIA H100 80GB HBM3 (replay)' for legends."""
    gpu, _, rest = label.partition(", ")
    return f"{gpu} (replay)" if rest.startswith("replayed") else f"{gpu} ({rest or 'live'})"


def figure(title: str, label: str, ncols: int = 1, nrows: int = 1, size=(6.4, 4.2)):
    """A figure with a title and, at its foot, where its numbers come from."""
    fig, axes = plt.subplots(nrows, ncols, figsize=(size[0] * ncols, size[1] * nrows), squeeze=False,
                             layout="constrained")
    fig.suptitle(title)
    fig.text(0.5, -0.01, f"measured on {label}", ha="center", va="top", fontsize=8, color="0.35")
    flat = axes.ravel()
    return fig, (flat[0] if len(flat) == 1 else flat)


def series(ax, xs, summaries, label: str, **style):
    """Medians as a line, the interquartile range as a band."""
    med = [s["median"] for s in summaries]
    line, = ax.plot(xs, med, marker="o", markersize=3, label=label, **style)
    ax.fill_between(xs, [s["p25"] for s in summaries], [s["p75"] for s in summaries], color=line.get_color(),
                    alpha=0.2, linewidth=0)
    return line


def bytes_axis(ax, axis: str = "x"):
    """Label a log2 axis of byte sizes as 1 KiB, 1 MiB, ..."""
    from matplotlib.ticker import FuncFormatter

    def fmt(v, _):
        for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
            if v >= scale:
                return f"{v / scale:g} {unit}"
        return f"{v:g} B"

    getattr(ax, f"set_{axis}scale")("log", base=2)
    getattr(ax, f"{axis}axis").set_major_formatter(FuncFormatter(fmt))


class Table:
    """A small table that shows as HTML in Jupyter and as text elsewhere, with its source under it."""

    def __init__(self, rows: list[dict], label: str, columns: list[str] | None = None, title: str = ""):
        self.rows, self.label, self.title = rows, label, title
        self.columns = columns or (list(rows[0]) if rows else [])

    @staticmethod
    def _fmt(v) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{text(c)}</th>" for c in self.columns)
        body = "".join("<tr>" + "".join(f"<td>{text(self._fmt(r.get(c, '')))}</td>" for c in self.columns)
                       + "</tr>" for r in self.rows)
        cap = f"<b>{text(self.title)}</b><br>" if self.title else ""
        return (f"<table><caption>{cap}<small>measured on {text(self.label)}</small></caption>"
                f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")

    def __repr__(self) -> str:
        cells = [[self._fmt(r.get(c, "")) for c in self.columns] for r in self.rows]
        widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(self.columns)]
        line = lambda vals: "  ".join(v.rjust(w) for v, w in zip(vals, widths))  # noqa: E731
        out = ([self.title] if self.title else []) + [line(self.columns)] + [line(r) for r in cells]
        return "\n".join(out + [f"(measured on {self.label})"])
