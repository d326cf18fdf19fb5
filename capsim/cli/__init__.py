"""The ``capsim`` command line (click): :mod:`.main` (run, validate, hardware, models,
roofline, calibrate) and :mod:`.sweep` (sweep, size)."""
