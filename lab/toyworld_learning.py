"""The toy-world learning study: a thin wrapper of `selfplay study` (selfplay_study), kept so
the old command still works. See lab/learning_study_protocol.md and docs/results.md.

    python lab/toyworld_learning.py [--arms rlvr,gasp] [--seeds 0,1,2] [--out runs/study] ...
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

if __name__ == "__main__":
    from selfplay_cli.main import main

    sys.exit(main(["study", *sys.argv[1:]]))
