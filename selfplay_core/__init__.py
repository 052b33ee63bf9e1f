"""selfplay: guided asymmetric self-play for code LLMs (the library; imports no Prefect)."""

__version__ = "0.1.0"
