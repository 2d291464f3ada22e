"""The explorer's four pictures of one tiling (PNG or SVG), drawn from ``model_tools.explain``:

- ``core_map``: each core's element range (big, small, last core), its tiles, and in red what the
  tiling reads and writes past the tensors' end;
- ``ub``: every UB buffer stacked against the usable UB and the reserve;
- ``timeline``: MTE2 / V / MTE3 per tile of one core of each kind as the simulator schedules them,
  with the bottleneck named;
- ``landscape``: predicted time over tile size x core count for the tiling's block size and
  BUFFER_NUM, with this tiling, the seed default and the model's best marked.

matplotlib's object API only (no pyplot state), so pictures can be drawn from several threads.
"""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from model_tools.explain import STAGES, Explanation

PICTURES = ("core_map", "ub", "timeline", "landscape")
FORMATS = ("svg", "png")
KIND_COLOURS = {"big": "#4C72B0", "small": "#55A868", "last": "#DD8452"}
STAGE_COLOURS = {"MTE2": "#4C72B0", "V": "#C44E52", "MTE3": "#8172B2"}
OOB = "#D62728"


def _core_map(e: Explanation, fig: Figure) -> None:
    ax = fig.add_subplot()
    cores = e.core_map
    for c in cores:
        inside = c.count - c.past_end
        ax.barh(c.core, inside, left=c.start, color=KIND_COLOURS[c.kind], height=0.8)
        if c.past_end:
            ax.barh(c.core, c.past_end, left=c.start + inside, color=OOB, height=0.8)
    drawn = sum(c.tiles for c in cores)
    if 0 < drawn <= 1500:  # tile boundaries, where they can be seen
        xs, ys = [], []
        for c in cores:
            for i in range(1, c.tiles):
                xs.append(c.start + i * c.tile_elems)
                ys.append(c.core)
        ax.scatter(xs, ys, marker="|", s=30, color="white", linewidths=0.6)
    ax.axvline(e.n, color="black", linestyle="--", linewidth=1)
    ax.set_xlabel("element")
    ax.set_ylabel("core")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.invert_yaxis()
    legend = [Patch(color=KIND_COLOURS[k], label=f"{k} core") for k in KIND_COLOURS if any(c.kind == k for c in cores)]
    if any(c.past_end for c in cores):
        legend.append(Patch(color=OOB, label="past the tensors' end"))
    ax.legend(handles=legend, loc="lower right", fontsize=8)
    tiles = ", ".join(sorted({f"{c.tiles} x {c.tile_elems}" for c in cores})[:3])
    ax.set_title(f"{e.n:,} elements over {len(cores)} cores (tiles per core x elements: {tiles})", fontsize=9)


def _ub(e: Explanation, fig: Figure) -> None:
    ax = fig.add_subplot()
    left = 0
    colours = ["#4C72B0", "#55A868", "#C44E52", "#8172B2", "#CCB974", "#64B5CD", "#DD8452", "#937860"]
    handles = []
    for i, b in enumerate(e.ub.buffers):
        colour = colours[i % len(colours)]
        for _ in range(b.count):
            ax.barh(0, b.bytes_each, left=left, color=colour, edgecolor="white", height=0.6)
            left += b.bytes_each
        handles.append(Patch(color=colour, label=f"{b.name} ({b.role}): {b.count} x {b.bytes_each:,} B"))
    ax.axvspan(e.ub.usable_bytes, e.ub.ub_bytes, color="#BBBBBB", alpha=0.6)
    handles.append(Patch(color="#BBBBBB", label=f"reserve: {e.ub.reserve_bytes:,} B"))
    ax.axvline(e.ub.usable_bytes, color="black", linestyle="--", linewidth=1)
    ax.set_xlim(0, e.ub.ub_bytes * 1.02)
    ax.set_yticks([])
    ax.set_xlabel("UB bytes")
    share = 100 * e.ub.used_bytes / e.ub.usable_bytes
    ax.set_title(f"UB: {e.ub.used_bytes:,} of {e.ub.usable_bytes:,} usable bytes ({share:.1f}%)", fontsize=9)
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2, fontsize=7, frameon=False)


def _timeline(e: Explanation, fig: Figure) -> None:
    ax = fig.add_subplot()
    labels: list[str] = []
    ticks: list[float] = []
    y = 0.0
    for tl in e.timelines:  # three lanes per core kind, half a lane between kinds
        for stage in STAGES:
            spans = [(s.start_us + tl.start_us, s.end_us - s.start_us) for s in tl.spans if s.stage == stage]
            ax.broken_barh(spans, (y - 0.4, 0.8), facecolors=STAGE_COLOURS[stage], edgecolors="white", linewidth=0.5)
            labels.append(f"{tl.kind} core {stage}")
            ticks.append(y)
            y += 1
        ax.plot([tl.end_us], [y - 1], marker="|", markersize=14, color="black")
        y += 0.5
    ax.set_yticks(ticks, labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("us from the launch (cold L2, as tuned; | marks the core's last CopyOut)")
    shown = max((len(tl.spans) // 3 for tl in e.timelines), default=0)
    most = max((tl.tiles for tl in e.timelines), default=0)
    extra = f", first {shown} of {most} tiles drawn" if most > shown else ""
    ax.set_title(f"pipeline per core kind: bottleneck {e.bottleneck}{extra}", fontsize=9)


def _landscape(e: Explanation, fig: Figure) -> None:
    ax = fig.add_subplot()
    land = e.landscape
    if land is None:
        ax.text(0.5, 0.5, "no landscape: empty shape or a BUFFER_NUM the exact kernel does not allow", ha="center")
        ax.set_axis_off()
        return
    grid = np.array(land.predicted_us, dtype=float)
    extent = (-0.5, len(land.tile_bytes) - 0.5, land.core_nums[-1] + 0.5, land.core_nums[0] - 0.5)
    norm = LogNorm(vmin=float(np.nanmin(grid)), vmax=float(np.nanmax(grid)))
    im = ax.imshow(grid, aspect="auto", cmap="viridis_r", extent=extent, interpolation="none", norm=norm)
    fig.colorbar(im, ax=ax, label="predicted us (log)")
    step = max(1, len(land.tile_bytes) // 8)
    ax.set_xticks(range(0, len(land.tile_bytes), step), [f"{t // 1024}K" if t >= 1024 else str(t)
                                                         for t in land.tile_bytes[::step]])  # fmt: skip
    ax.set_xlabel("tile bytes")
    ax.set_ylabel("cores")
    styles = {"this tiling": ("o", "white", 11), "seed default": ("s", "#DD8452", 8), "model best": ("*", "#D62728", 9)}
    for name in sorted(land.marks, key=lambda m: list(styles).index(m) if m in styles else len(styles)):
        tile, cores = land.marks[name]
        x = int(np.argmin(np.abs(np.array(land.tile_bytes) - tile)))
        marker, colour, size = styles.get(name, ("x", "black", 9))
        ax.plot([x], [cores], marker=marker, color=colour, markeredgecolor="black", markersize=size, linestyle="",
                label=name)  # fmt: skip
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, fontsize=7, frameon=False)
    ax.set_title(f"block {land.block_bytes} B, BUFFER_NUM {land.buffer_num}: best {np.nanmin(grid):.3f} us, "
                 f"roofline {land.roofline_us:.3f} us", fontsize=9)  # fmt: skip


DRAW = {"core_map": _core_map, "ub": _ub, "timeline": _timeline, "landscape": _landscape}
SIZES = {"core_map": (7.0, 4.2), "ub": (7.0, 4.4), "timeline": (7.0, 4.2), "landscape": (7.0, 4.6)}


def figure(e: Explanation, picture: str) -> Figure:
    if picture not in DRAW:
        raise ValueError(f"unknown picture {picture!r}; known: {', '.join(PICTURES)}")
    fig = Figure(figsize=SIZES[picture], layout="constrained")
    DRAW[picture](e, fig)
    return fig


def render(e: Explanation, picture: str, fmt: str = "svg") -> bytes:
    """One picture as SVG or PNG bytes (SVG without a date, so the same tiling gives the same bytes)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    buf = io.BytesIO()
    metadata = {"Date": None} if fmt == "svg" else {}
    with matplotlib.rc_context({"svg.hashsalt": "bcetune"}):  # stable element ids
        figure(e, picture).savefig(buf, format=fmt, dpi=110, metadata=metadata)
    return buf.getvalue()


def write_all(e: Explanation, out_dir: str | Path, formats: tuple[str, ...] = FORMATS) -> list[Path]:
    """Every picture in every format into ``out_dir`` (created); returns the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for picture in PICTURES:
        for fmt in formats:
            path = out / f"{picture}.{fmt}"
            path.write_bytes(render(e, picture, fmt))
            paths.append(path)
    return paths
