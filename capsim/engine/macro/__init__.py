"""Decode runs (macro-steps): decode-only stretches planned (:mod:`.plan`) and advanced
in one SimPy event (:mod:`.runner`), with exactly the step-by-step results."""
