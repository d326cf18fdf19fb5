"""The ``capsim`` command line (click): :mod:`.main` (run, validate, hardware, models,
roofline, compare, calibrate) and :mod:`.sweep` (sweep, size)."""
