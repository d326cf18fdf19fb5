"""The capsim reports: self-contained directories a sizing meeting can open offline.

- :mod:`capsim.report.run` — the report of ``capsim run`` (:func:`write`) and its
  terminal summary;
- :mod:`capsim.report.sweep` — the report of ``capsim sweep`` and ``capsim size``;
- :mod:`capsim.report.calibration` — the fidelity page of ``capsim calibrate``;
- :mod:`capsim.report.outdir` — which ``-o`` directories may be replaced
  (:func:`check_out_dir`) and replacing one whole;
- :mod:`capsim.report.charts` — who draws a report's PNGs: this process, or (``capsim
  run``) a process forked before the simulation, while this one writes the rest;
- :mod:`capsim.report.plotting`, :mod:`capsim.report.style`, :mod:`capsim.report.cells`
  and :mod:`capsim.report.pages` — what the figures, tables and pages share.

Only this package imports matplotlib (object API + Agg, never pyplot).
"""

from capsim.report.outdir import check_out_dir
from capsim.report.run.page import write

__all__ = ["check_out_dir", "write"]
