"""What one engine step costs: per-operator reference formulas (:mod:`.operators`), the
roofline pricer used per step and per decode run (:mod:`.pricer`), and the
``capsim roofline`` table (:mod:`.describe`)."""
