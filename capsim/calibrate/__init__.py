"""Calibrate a hardware profile's efficiencies against measured GPU timings.

Readers turn measurements into one observation table
(:mod:`~capsim.calibrate.observations`): Microsoft Vidur's profiling CSVs
(:mod:`~capsim.calibrate.vidur`), a plain CSV (:mod:`~capsim.calibrate.plain`).
:mod:`~capsim.calibrate.model` predicts each row with the roofline's formulas,
:mod:`~capsim.calibrate.fit` fits the per-operator-class factors by least
squares, :mod:`~capsim.calibrate.stats` scores them (median / p90 absolute
percentage error). :func:`calibrate` ties them together for ``capsim calibrate``.

Measured serving runs: :mod:`~capsim.calibrate.readers` reads the result files of
benchmark clients (vllm bench serve, sglang.bench_serving, GuideLLM, AIPerf,
genai-perf) into one :class:`~capsim.calibrate.measured.MeasuredRun`;
:mod:`~capsim.calibrate.replay` turns it into a trace with the measured arrivals;
:mod:`~capsim.calibrate.serving` fits the step overhead and a GPU-time scale by
simulating the same requests; :mod:`~capsim.calibrate.compare` sets measured against
simulated latency distributions for ``capsim compare``.
"""

from capsim.calibrate.fit import fit_class, fit_profile
from capsim.calibrate.model import predict
from capsim.calibrate.observations import OP_CLASSES, from_model_rows
from capsim.calibrate.plain import read_plain_csv
from capsim.calibrate.profile_io import profile_yaml, write_profile
from capsim.calibrate.run import Inputs, Outcome, calibrate
from capsim.calibrate.stats import class_errors, error_figures
from capsim.calibrate.vidur import load_vidur

__all__ = [
    "OP_CLASSES", "Inputs", "Outcome", "calibrate", "class_errors", "error_figures",
    "fit_class", "fit_profile", "from_model_rows", "load_vidur", "predict", "profile_yaml",
    "read_plain_csv", "write_profile",
]
