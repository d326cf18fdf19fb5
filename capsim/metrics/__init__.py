"""From a run's result to summary rows: percentiles, goodput, utilisation, KV and cost
(:mod:`.summary`); the transfer and pool columns of a disaggregated split
(:mod:`.disagg`)."""
