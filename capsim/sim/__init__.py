"""One variant over one trace: :func:`.simulate.simulate` wires the replicas (or a
disaggregated cluster) into a SimPy environment, builds requests as they arrive
(:mod:`.request_source`), logs their outcomes (:mod:`.request_log`) and checks the
run's invariants."""
