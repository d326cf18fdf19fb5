"""The report of ``capsim sweep`` and ``capsim size``: index.html, figures, CSVs
(:mod:`.page`) and the terminal tables (:mod:`.console`)."""
