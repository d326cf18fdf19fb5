"""capsim: a discrete-event capacity-planning simulator for LLM serving."""

__version__ = "0.1.0"
