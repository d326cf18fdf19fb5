"""The result model, the only contract between the simulation and the reports:
:mod:`.model` (RunResult, per-request records, ITL runs, replica stats, timelines,
summary rows; pydantic, JSON round-trip) and :mod:`.arrays` (its numpy column types)."""
