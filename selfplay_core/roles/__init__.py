"""Prompt builders and output parsers for each role (student, teacher, ...).

Parsers take raw model output, however messy, and return a typed result or a typed `Rejection`;
they never raise, because a malformed proposal is an ordinary event under RL (it is scored, e.g.
with a format penalty), not an error.
"""

from selfplay_core.roles.common import Rejection

__all__ = ["Rejection"]
