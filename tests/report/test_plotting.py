"""capsim.report.plotting.save: the layout solved once, one draw per PNG."""

from __future__ import annotations

import matplotlib
from matplotlib.figure import Figure

from capsim.report.plotting import figure, save
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
