"""Thin Prefect task wrappers around selfplay_core (retries, timeouts, caching)."""
