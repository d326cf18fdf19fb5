"""Data with sources: GPU profiles (:mod:`.hardware`), model shapes (:mod:`.models`) and
KV-transfer links (:mod:`.links`), each read from YAML under ``profiles/data/`` or a
user file."""
