"""What one engine step costs: per-operator reference formulas (:mod:`.operators`), the
roofline pricer used per step and per decode run (:mod:`.pricer`, composing
:mod:`.operator_terms`, :mod:`.experts`, :mod:`.communication`, :mod:`.host` and
:mod:`.decode_run`; shared types in :mod:`.terms`), the pipeline-parallel and
speculative pricers (:mod:`.pipeline`, :mod:`.speculative`) and the ``capsim roofline``
table (:mod:`.describe`)."""
