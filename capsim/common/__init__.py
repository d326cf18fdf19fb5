"""What every layer uses: user-facing errors (:mod:`.errors`), the strict pydantic base
model and integer type (:mod:`.schema`), the one YAML reader (:mod:`.yamlio`:
exponent-notation numbers, repeated keys refused)."""
