"""What every layer uses: user-facing errors (:mod:`.errors`), the strict pydantic base
model and integer type (:mod:`.schema`), YAML reading that refuses repeated keys
(:mod:`.yamlio`)."""
