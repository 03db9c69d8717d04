"""What every figure shares: matplotlib without a display, size and world-size axes, and
`save` (small, byte-reproducible files, each returned as a SavedFigure)."""
from __future__ import annotations

import io
import re
import warnings
from contextlib import contextmanager
from pathlib import Path, PosixPath

import matplotlib

matplotlib.use("Agg")  # files only; no display needed
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullLocator  # noqa: E402

from allreduce_bench.core.units import format_size  # noqa: E402

LINE_STYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3)))
MARKERS = ("o", "s", "^", "D", "v", "P")
SIZE_LABEL = "tensor size per rank (bytes)"
DPI = 100
# No version or date stamped in files, so regenerating unchanged results changes no bytes.
STABLE_METADATA = {".png": {"Software": None}, ".svg": {"Date": None},
                   ".pdf": {"CreationDate": None}}


def size_axis(ax) -> None:
    """log2 size axis labelled 1K, 1M, 1G."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(LogLocator(base=4))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: format_size(x)))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(SIZE_LABEL)


def world_size_axis(ax, world_sizes) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(sorted(world_sizes)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("world size N (ranks)")


def log_y_axis(ax) -> None:
    """log y axis with plain labels (1, 2, 5, 10, 20, ..., 1,000,000), not 2x10^4."""
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1, 2, 5)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:,.0f}" if y >= 1 else f"{y:g}"))
    ax.yaxis.set_minor_locator(NullLocator())


def legend(ax, **options) -> None:
    """A legend where some artist has a label (matplotlib warns about an empty one)."""
    handles, _ = ax.get_legend_handles_labels()
    if handles:
        ax.legend(**options)


@contextmanager
def quiet_layout():
    """No "Tight layout not applied" warning: the figure is saved as laid out, which is fine."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Tight layout not applied", UserWarning)
        yield


class SavedFigure(PosixPath):
    """A figure's path holding its figure, so report.html inlines the very figures report.md links to."""

    figure = None

    def svg(self, prefix: str) -> str | None:
        """The figure as an <svg> element to inline in HTML (its ids prefixed: unique_ids)."""
        return None if self.figure is None else unique_ids(svg_text(self.figure), prefix)


def save(fig, path: Path) -> SavedFigure:
    """Write and close `fig`; PNGs through a 256-colour palette (a third of the bytes, the same look)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".png":
        from PIL import Image  # matplotlib's own dependency

        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=DPI, metadata=STABLE_METADATA[".png"])
        image = Image.open(buffer).convert("RGB")  # method 0: median cut, in every Pillow
        image.quantize(colors=256, method=0).save(path, optimize=True)
    else:
        fig.savefig(path, dpi=DPI, metadata=STABLE_METADATA.get(path.suffix))
    plt.close(fig)
    saved = SavedFigure(path)
    saved.figure = fig
    return saved


def save_with_footnote(fig, path: Path, footnote: str = "", right: float = 1.0) -> SavedFigure:
    """`save`, with `footnote` small in the bottom-left corner (and the figure left of `right`)."""
    if footnote:
        fig.text(0.01, 0.01, footnote, fontsize=7, alpha=0.7)
    with quiet_layout():
        fig.tight_layout(rect=(0, 0.04, right, 1))
    return save(fig, path)


def svg_text(fig) -> str:
    """`fig` as an <svg> element to inline: no prologue, no date, text as text (half the bytes)."""
    buffer = io.StringIO()
    with plt.rc_context({"svg.fonttype": "none"}):
        fig.savefig(buffer, format="svg", dpi=DPI, metadata=STABLE_METADATA[".svg"])
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def unique_ids(svg: str, prefix: str) -> str:
    """`svg` with every id and reference prefixed: matplotlib reuses ids in every figure."""
    svg = re.sub(r'\bid="', f'id="{prefix}', svg)
    return re.sub(r'(href="#|url\(#)', rf"\g<1>{prefix}", svg)
