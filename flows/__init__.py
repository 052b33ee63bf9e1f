"""Prefect flows: the self-play loop, goalpost mining, evaluation, toy-model bootstrap."""
