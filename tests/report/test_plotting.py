"""capsim.report.plotting: ``save`` solves the layout once (one draw per PNG); log axes
leave out the ticks beyond the view (``InViewLogLocator``), drawing the same ones."""

from __future__ import annotations

import matplotlib
from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator, NullFormatter

from capsim.report.plotting import PLAIN, figure, log_axis, save
from capsim.report.style import RC


def _drawn_figure():
    fig = figure(4.0, 3.0)
    ax = fig.subplots()
    ax.plot([1, 2, 3], [3, 1, 2], label="a line")
    ax.set_title("a title")
    ax.legend(loc="best")
    return fig


def test_save_draws_the_figure_once_and_leaves_no_layout_engine(tmp_path, monkeypatch):
    draws = []
    original = Figure.draw
    monkeypatch.setattr(Figure, "draw", lambda self, r: (draws.append(1), original(self, r)))
    with matplotlib.rc_context(RC):
        fig = _drawn_figure()
        save(fig, tmp_path / "f.png")
    # matplotlib's savefig draws twice (a trial draw for the layout) while any layout
    # engine, even the "none" placeholder, is set.
    assert len(draws) == 1
    assert fig.get_layout_engine() is None
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_save_gives_the_pixels_of_savefig_with_its_own_layout(tmp_path):
    with matplotlib.rc_context(RC):
        save(_drawn_figure(), tmp_path / "once.png")
        # The reference: matplotlib's own path, constrained layout solved inside savefig.
        from capsim.report.style import DPI, PNG_COMPRESS_LEVEL
        _drawn_figure().savefig(tmp_path / "ref.png", dpi=DPI, format="png",
                                metadata={"Software": None},
                                pil_kwargs={"compress_level": PNG_COMPRESS_LEVEL})
    assert (tmp_path / "once.png").read_bytes() == (tmp_path / "ref.png").read_bytes()


def test_save_leaves_an_autolayout_rc_unused(tmp_path):
    # figure.autolayout on (a user's matplotlibrc): removing the engine must not re-lay out
    # the figure with tight_layout before it is drawn, so the same bytes as with it off.
    with matplotlib.rc_context(RC):
        save(_drawn_figure(), tmp_path / "off.png")
    with matplotlib.rc_context({**RC, "figure.autolayout": True}):
        fig = _drawn_figure()
        save(fig, tmp_path / "on.png")
    assert (tmp_path / "on.png").read_bytes() == (tmp_path / "off.png").read_bytes()


def _log_axes(locator_for_axis):
    """An axes with a log x axis over 4..360 ms (the azure_conv_replay ITL chart's span:
    parts of a decade at each end), its locators set by ``locator_for_axis(axis)``."""
    fig = figure(4.0, 3.0)
    ax = fig.subplots()
    ax.plot([5.0, 300.0], [0.0, 1.0])
    ax.set_xscale("log")
    ax.set_xlim(4.0, 360.0)
    locator_for_axis(ax.xaxis)
    return fig, ax


def test_in_view_log_locator_drops_only_ticks_beyond_the_view():
    with matplotlib.rc_context(RC):
        fig, ax = _log_axes(lambda axis: log_axis(axis, PLAIN, 4.0, 360.0))
        minor = ax.xaxis.get_minor_locator()()
        major = ax.xaxis.get_major_locator()()
    # matplotlib's LogLocator gives 24 minor ticks, 2..9 from 2 to 900 (8 beyond the view),
    # and majors 1-2-5 from 1 to past 360; the ticks kept are those in 4..360.
    assert list(minor) == [4, 5, 6, 7, 8, 9, 20, 30, 40, 50, 60, 70, 80, 90, 200, 300]
    assert list(major) == [5, 10, 20, 50, 100, 200]
    assert len(LogLocator(base=10, subs="auto").tick_values(4.0, 360.0)) == 24


def test_in_view_log_locator_draws_what_matplotlibs_locator_draws(tmp_path):
    def plain(axis):
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(PLAIN)
        axis.set_minor_formatter(NullFormatter())

    # The same pixels as matplotlib's own LogLocator, ticks beyond the view and all.
    with matplotlib.rc_context(RC):
        fig_ref, _ = _log_axes(plain)
        fig_ours, _ = _log_axes(lambda axis: log_axis(axis, PLAIN, 4.0, 360.0))
        save(fig_ref, tmp_path / "ref.png")
        save(fig_ours, tmp_path / "ours.png")
    assert (tmp_path / "ours.png").read_bytes() == (tmp_path / "ref.png").read_bytes()


def test_reference_lines_at_one_value_are_drawn_once_with_both_labels():
    """rag_mix's class TTFT limit and its ttft_p99 target are both 3,000 ms: one line, both
    names in its legend entry (two lines on top of each other show only the last)."""
    from capsim.report.plotting import reference_lines
    with matplotlib.rc_context(RC):
        fig = figure(4.0, 3.0)
        ax = fig.subplots()
        handles = reference_lines(ax, [(3000.0, "TTFT limit rag 3000 ms", "#8E44AD", "--"),
                                       (3000.0, "target ttft_p99_ms ≤ 3000 ms", "#C0392B", "-."),
                                       (500.0, "TTFT limit 500 ms", "#C0392B", "--")])
        assert [h.get_label() for h in handles] == [
            "TTFT limit rag 3000 ms = target ttft_p99_ms ≤ 3000 ms", "TTFT limit 500 ms"]
        assert len(ax.lines) == 2
        assert handles[0].get_linestyle() == "--"
        del fig


def test_save_centres_a_figure_title_over_the_axes_not_the_figure(tmp_path):
    """A timeline's title sat off-centre over its panels: the legend column to their right
    widens the figure, and ``suptitle`` centres on the figure."""
    with matplotlib.rc_context(RC):
        fig = figure(8.0, 3.0)
        ax = fig.subplots()
        ax.plot([1, 2], [1, 2], label="a line with a long legend label")
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0))
        title = fig.suptitle("Timeline — v")
        save(fig, tmp_path / "t.png", centre_over_axes=title)
        box = ax.get_position()
        assert title.get_position()[0] == (box.x0 + box.x1) / 2
        assert title.get_position()[0] < 0.45        # left of the figure's middle
        assert (tmp_path / "t.png").stat().st_size > 0
