"""A scenario file from YAML to resolved runs: the schema (:mod:`.schema` and the
section modules :mod:`.workload`, :mod:`.slo`, :mod:`.disagg`, :mod:`.sweep`),
pydantic errors as one line (:mod:`.validation`), ``--set`` (:mod:`.overrides`),
reading (:mod:`.load`) and resolution into pools and run configs (:mod:`.resolve`)."""
