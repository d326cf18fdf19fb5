"""Many runs: sweeps over a grid × variants × seeds (:mod:`.sweep`), sizing the fewest
GPUs or the highest rate (:mod:`.sizing`, :mod:`.fleet`, :mod:`.evaluation`,
:mod:`.search`), running them in parallel (:mod:`.parallel`, :mod:`.task`) and their
statistics (:mod:`.confidence`, :mod:`.queueing`)."""
