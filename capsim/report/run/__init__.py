"""The report of ``capsim run``: index.html, figures, CSVs (:mod:`.page`) and the terminal
summary (:mod:`.console`)."""
