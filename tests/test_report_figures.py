"""Every report figure, drawn from a real MLflow store with crafted runs, checked from its
matplotlib objects: no two legend entries share colour, line style and marker; no legend covers an
axes' data area or leaves the figure; captions name the colours and styles that are drawn;
baselines carry their seed spread; panels name the paper's size and the models' parameter count;
the loss axis is linear and a log perplexity axis is labelled in plain numbers.

Two of the report tests' sweeps (``report_support``: recursion_ablation, kq_diagonal, whose
Llama baseline is recursion_ablation's), a sweep of 16 cells (T x preconditioner x eta beside
Llama, one seed) that gives panels with more lines than the palette has colours, and two sweeps
that run T = 1 and 2 each at eta = 1 and 1/2 (Fig. 2c; Fig. 4 with plain reuse), whose lines and
arrows are read back against the values written.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import report_support as rs  # noqa: E402

from cemlab.tracking import schema  # noqa: E402

MANY = """\
figure: "Fig 2c"
figures: [fig2c]
axes: {size: [s1], seed: [0]}
variants:
  - {group: llama, label: llama}
  - group: cem-attn
    label: "cem-attn T{T} {precond} eta={eta}"
    set: {model.attention: cem, model.attn_steps: "{T}", model.attn_precond: "{precond}", model.attn_eta: "{eta}"}
    axes: {T: [1, 2, 3], precond: [none, diag, dplr], eta: [1, "1/T"]}
"""


def _write_many(uri: str, artifacts: Path) -> None:
    from cemlab.sweeps.sweepfile.load import load_sweep

    w = rs.RunWriter(uri, artifacts)
    parent = w.parent("many")
    done = set()
    for i, t in enumerate(load_sweep("many").expand("smoke")):
        if t.config_hash in done:  # T=1 is one model under every eta
            continue
        done.add(t.config_hash)
        v = 30.0 + 0.3 * i + t.axes["seed"]
        w.trial(t, metrics=rs.lm_metrics(v, params=1e6 if t.group == "llama" else 0.9e6), parent_id=parent,
                histories={schema.TRAIN_LOSS: [(s, 6.0 - 0.001 * s * (1 + i / 20)) for s in range(0, 300, 50)],
                           schema.VAL_PPL: [(s, v + 400.0 / (1 + s)) for s in (10, 100, 300)]})

#: T x eta crossed, as recursion_ablation and reuse_vs_recursion_attention run it, at the size s2 that
#: no other sweep written here has (every run its own); the T=1 cells at eta=1 and eta=1/2 are two
#: models with far apart perplexities.
ETAS = """\
figure: "Fig 2c"
figures: [fig2c]
axes: {size: [s2], seed: [0, 1]}
variants:
  - {group: llama, label: llama}
  - group: cem-attn
    label: "cem-attn T{T} dplr eta={eta}"
    set: {model.attention: cem, model.attn_steps: "{T}", model.attn_precond: dplr, model.attn_eta: "{eta}"}
    axes: {T: [1, 2], eta: [1, 0.5]}
"""
ETAS_REUSE = """\
figure: "Fig 4"
figures: [fig4]
axes: {size: [s2], seed: [0, 1]}
variants:
  - {group: reuse-attn, label: "reuse-attn T{T}", set: {model.attn_reuse: "{T}"}, axes: {T: [1, 2]}}
  - group: cem-attn
    label: "cem-attn T{T} eta={eta}"
    set: {model.attention: cem, model.attn_steps: "{T}", model.attn_eta: "{eta}"}
    axes: {T: [1, 2], eta: [1, 0.5]}
"""
#: (T, eta) -> test perplexity at seed 0 (seed 1: one more); Llama (plain reuse at T=1) and plain reuse at T=2.
ETA_PPL = {(1, 1.0): 173.1, (1, 0.5): 136.8, (2, 1.0): 243.4, (2, 0.5): 150.2}
LLAMA_S2, REUSE_T2 = 160.0, 165.0


def _eta_value(t) -> float:
    """A trial's crafted perplexity in the eta sweeps."""
    if t.group == "cem-attn":
        return ETA_PPL[(t.axes["T"], float(t.axes["eta"]))] + t.axes["seed"]
    return (REUSE_T2 if t.axes.get("T", 1) == 2 else LLAMA_S2) + t.axes["seed"]


def _write_etas(uri: str, artifacts: Path) -> None:
    from cemlab.sweeps.sweepfile.load import load_sweep

    w = rs.RunWriter(uri, artifacts)
    done = set()
    for name in ("etas", "etas_reuse"):
        parent = w.parent(name)
        for t in load_sweep(name).expand("smoke"):
            if t.config_hash not in done:  # plain reuse at T=1 is the Llama baseline: written once
                done.add(t.config_hash)
                w.trial(t, metrics=rs.lm_metrics(_eta_value(t), params=1.8e6 if t.group == "cem-attn" else 2e6),
                        parent_id=parent)


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    """Figure id -> ``Figure`` for every paper figure of the test sweeps and the generic figures of
    recursion_ablation and the many-line sweep."""
    from cemlab.report.inputs.context import ReportContext
    from cemlab.report.inputs.grids import SweepGrids
    from cemlab.report.figures.catalog import GENERIC_FIGURES, PAPER_FIGURES
    from cemlab.tracking.runs import RunStore

    root = tmp_path_factory.mktemp("figures")
    with pytest.MonkeyPatch.context() as mp:
        sweeps = rs.write_sweeps(root / "sweeps")
        (sweeps / "many.yaml").write_text(MANY)
        (sweeps / "etas.yaml").write_text(ETAS)
        (sweeps / "etas_reuse.yaml").write_text(ETAS_REUSE)
        mp.setenv("CEMLAB_SWEEPS_DIR", str(sweeps))
        uri = rs.migrated_store(root / "template.db", root / "mlflow.db")
        rs.populate(uri, root / "artifacts", ["recursion_ablation", "kq_diagonal"])
        _write_many(uri, root / "artifacts")
        _write_etas(uri, root / "artifacts")
        store, grids = RunStore(uri), SweepGrids()
        out = {}
        for sweep in ["recursion_ablation", "kq_diagonal", "many", "etas", "etas_reuse"]:
            ctx = ReportContext(sweep, "smoke", store, grids)
            for fid in grids.spec(sweep).figures:
                out[f"{sweep}/{fid}"] = PAPER_FIGURES[fid](ctx)
            if sweep in ("recursion_ablation", "many"):
                out.update({f"{sweep}/{name}": b(ctx) for name, b in GENERIC_FIGURES.items()})
        yield {k: f for k, f in out.items() if f is not None and f.fig is not None}
    import matplotlib.pyplot as plt

    plt.close("all")


def _legends(fig) -> list[list[tuple[str, tuple]]]:
    """Per legend of ``fig``: (label, (colour, line style, marker)) of each entry, from the artists
    drawn (a legend of one axes reads that axes' artists; a legend built from several, all of them)."""
    from matplotlib.colors import to_hex
    from matplotlib.container import ErrorbarContainer

    merged = {}
    for ax in fig.axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            merged.setdefault(lab, h)
    out = []
    for ax, leg in [(ax, ax.get_legend()) for ax in fig.axes] + [(None, leg) for leg in fig.legends]:
        if leg is None:
            continue
        own = dict(zip(*reversed(ax.get_legend_handles_labels()))) if ax is not None else {}
        entries = []
        for text in leg.get_texts():
            h = own.get(text.get_text()) or merged[text.get_text()]
            line = h.lines[0] if isinstance(h, ErrorbarContainer) else h
            entries.append((text.get_text(), (to_hex(line.get_color()), line.get_linestyle(), line.get_marker())))
        out.append(entries)
    return out


def _entries(fig) -> dict[str, tuple]:
    return {label: style for entries in _legends(fig) for label, style in entries}


def test_figures_have_distinct_lines_and_legends_off_the_data(drawn):
    from cemlab.report.figures.plotting import PALETTE

    assert {"recursion_ablation/fig2c", "recursion_ablation/fig2d", "recursion_ablation/energy",
            "recursion_ablation/test_time_recursion", "recursion_ablation/training", "kq_diagonal/fig3b", "many/fig2c",
            "many/training"} <= set(drawn)
    # the many-line sweep has more lines in a panel than the palette has colours
    assert max(len(ax.get_legend_handles_labels()[1]) for ax in drawn["many/training"].fig.axes) > len(PALETTE)
    for name, f in drawn.items():
        legends = _legends(f.fig)
        assert legends, name
        for entries in legends:
            styles = [s for _, s in entries]
            assert entries and len(set(styles)) == len(styles), (name, entries)
        f.fig.canvas.draw()
        renderer = f.fig.canvas.get_renderer()
        page = f.fig.bbox
        for leg in [ax.get_legend() for ax in f.fig.axes if ax.get_legend()] + list(f.fig.legends):
            box = leg.get_window_extent(renderer)
            assert page.x0 <= box.x0 and box.x1 <= page.x1 + 1 and page.y0 <= box.y0 and box.y1 <= page.y1 + 1, name
            for ax in f.fig.axes:
                assert not box.overlaps(ax.get_window_extent(renderer)), (name, ax.get_title())


def _band(ax, color: str) -> tuple[float, float]:
    """The y extent of the filled band of ``color`` in ``ax`` (data units)."""
    from matplotlib.colors import to_hex

    for p in ax.patches:
        if to_hex(p.get_facecolor()) == color:
            ys = p.get_path().transformed(p.get_patch_transform()).vertices[:, 1]
            return float(ys.min()), float(ys.max())
    raise AssertionError(f"no band of {color} in {ax.get_title()}")


def test_captions_baselines_and_panels_say_what_is_drawn(drawn):
    from cemlab.report.figures.plotting import color_name, style_name

    f = drawn["recursion_ablation/fig2c"]
    ax = f.fig.axes[0]
    entries = _entries(f.fig)
    color, ls, _ = entries["Llama"]
    assert f"the {style_name(ls)} {color_name(color)} line is the Llama baseline" in f.caption, f.caption
    for precond in ("diag", "dplr"):
        assert f"{precond} {color_name(entries[f'precond {precond}'][0])}" in f.caption
    # the baseline's band is its seed std, computed here from the values written
    llama = rs.ATTN[("s1", "llama")]
    lo, hi = _band(ax, color)
    mean, std = statistics.mean(llama), statistics.stdev(llama)
    assert lo == pytest.approx(mean - std) and hi == pytest.approx(mean + std)
    # the panel names the paper's size and the parameters of the models drawn (CEM 0.9e6, Llama 1e6)
    assert ax.get_title() == "size s1: models of 0.9M-1M params"
    # Fig. 3b: each size's baseline is drawn in the size's colour, with its band, as the caption says
    f = drawn["kq_diagonal/fig3b"]
    entries = _entries(f.fig)
    assert entries["Llama s1"][:2] == (entries["size s1: models of 0.9M-1M params"][0], "--")
    assert f"s1 {color_name(entries['Llama s1'][0])}" in f.caption
    assert _band(f.fig.axes[0], entries["Llama s1"][0]) == (pytest.approx(mean - std), pytest.approx(mean + std))
    # the loss axis is linear; the perplexity axis, on a log scale, is labelled in plain numbers
    axes = {a.get_ylabel().split(" ")[0]: a for a in drawn["many/training"].fig.axes}
    assert axes[schema.TRAIN_LOSS].get_yscale() == "linear"
    labels = [t.get_text() for t in axes[schema.VAL_PPL].get_yticklabels(minor=True)
              + axes[schema.VAL_PPL].get_yticklabels()]
    assert labels and not any("times" in t or "^" in t or "$" in t for t in labels), labels


def _mean(T: int, eta: float) -> float:
    return statistics.mean(ETA_PPL[(T, eta)] + seed for seed in (0, 1))


def test_each_step_size_is_drawn_through_its_own_cells(drawn):
    """Fig. 2c: the eta=1 line joins T=1 at eta=1 to T=2 at eta=1, the eta=1/2 line T=1 at eta=1/2 to
    T=2 at eta=1/2: no T=1 cell of the other step size on a line (read from the Line2D drawn)."""
    from matplotlib.container import ErrorbarContainer

    f = drawn["etas/fig2c"]
    lines = {c.get_label(): list(zip(c.lines[0].get_xdata(), c.lines[0].get_ydata()))
             for c in f.fig.axes[0].containers if isinstance(c, ErrorbarContainer)}
    assert set(lines) == {"precond dplr, eta=1", "precond dplr, eta=0.5"}, lines
    for eta in (1.0, 0.5):
        points = lines[f"precond dplr, eta={eta:g}"]
        assert [x for x, _ in points] == [1, 2], points
        assert [y for _, y in points] == [pytest.approx(_mean(1, eta)), pytest.approx(_mean(2, eta))], (eta, points)
    assert "each line through the cells of its own eta only" in f.caption, f.caption


def test_reuse_figure_compares_each_step_size_with_its_own_t1(drawn):
    """Fig. 4: each CEM setting named by its eta has its T=1 and T=2 points (and the gain) at that eta,
    in the figure's table and in the markers drawn; plain reuse is Llama at T=1 and reuse at T=2."""
    from matplotlib.colors import to_hex

    from cemlab.report.figures.plotting import T1_COLOR, T2_COLOR

    f = drawn["etas_reuse/fig4"]
    gains = f.tables["fig4"].set_index("setting")
    expected = {"CEM eta=1": (_mean(1, 1.0), _mean(2, 1.0)), "CEM eta=0.5": (_mean(1, 0.5), _mean(2, 0.5)),
                "plain reuse": (LLAMA_S2 + 0.5, REUSE_T2 + 0.5)}
    assert set(gains.index) == set(expected), gains.index
    ax = f.fig.axes[0]
    where = {t.get_text(): t.get_position()[0] for t in ax.texts}   # each setting's name above its points
    drawn_at = {}
    for c in ax.containers:
        color = to_hex(c.lines[0].get_color())
        for x, y in zip(c.lines[0].get_xdata(), c.lines[0].get_ydata()):
            drawn_at[(x, color)] = y
    for setting, (t1, t2) in expected.items():
        row = gains.loc[setting]
        assert (row["T1_mean"], row["T2_mean"]) == (pytest.approx(t1), pytest.approx(t2)), (setting, row)
        assert row["gain"] == pytest.approx(t1 - t2)
        x = where[setting]
        assert drawn_at[(x, T1_COLOR)] == pytest.approx(t1) and drawn_at[(x, T2_COLOR)] == pytest.approx(t2), setting
    assert "a setting named with an eta has both its points at that step size" in f.caption, f.caption
