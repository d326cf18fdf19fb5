"""The ``capsim`` command line (click): :mod:`.main` (the group, the entry point) and one
module per command (:mod:`.run`, :mod:`.validate`, :mod:`.sweep`, :mod:`.size`, …), with
what they share in :mod:`.common`."""
