"""The learning study (docs/design.md, the toy world): a pre-registered protocol of arms x seeds on one
budget, a final evaluation strong enough to separate arms (goalpost hits at large k against the
start checkpoint's floor; held-out pass@k by depth on the whole split), and its table, figure,
markdown and MLflow run. `selfplay study` runs it; docs/results.md holds its
markdown, whatever it shows.

    protocol.py    arms, seeds, budget, final evaluation (hashed, saved before the first run)
    final_eval.py  one checkpoint's counts on the goalposts and the held-out split
    report.py      table, comparisons, figure, the results page's section
    runner.py      runs every arm x seed (resumable), the floor, the MLflow study run
"""
