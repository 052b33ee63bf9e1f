"""The curriculum lineage page on hand-built records (the real-run test is
tests/integration/test_learning_study_features.py): chains goalpost -> lemma -> lift, the band
highlight, trained and fidelity marks, and when a goalpost was first solved."""

import html
import re

from selfplay_core.tracking.lineage import first_solved, render


def _rec(id, kind, goalpost, parent, *, it=1, p=0.5, reward=0.4, faithful=True, accepted=True,
         trained=False, question=None):
    return {"id": id, "iteration": it, "kind": kind, "goalpost": goalpost, "parent": parent,
            "axis": "f", "question": question or f"question of {id}", "accepted": accepted,
            "rejection": None if accepted else "duplicate", "pass_rate": p, "reward": reward,
            "faithful": faithful, "trained": trained}


def test_first_solved_is_the_first_checkpoint_with_a_pass():
    labels = ["iteration 2", "iteration 4", "iteration 6"]
    rows = [[0.0, 0.0, 0.0], [0.0, 0.25, 0.0], [0.5, 0.0, 0.0]]
    # g2 is first hit at iteration 4 (and not at 6: still counts), g1 at 6, g3 never.
    assert first_solved(labels, rows, ["g1", "g2", "g3"]) == {"g2": "iteration 4", "g1": "iteration 6"}


def test_page_chains_lemmas_and_their_lifts_under_each_goalpost():
    recs = [_rec("L1", "lemma", "g1", "g1", p=0.5, trained=True),
            _rec("L2", "lemma", "g1", "g1", it=2, p=0.9, faithful=False),
            _rec("X1", "lift", "g1", "L1", p=0.25, question="a <b> & c"),
            _rec("L3", "lemma", "g2", "g2", accepted=False, p=None, reward=None, faithful=None)]
    gps = [{"id": "g1", "question": "goalpost one"}, {"id": "g2", "question": "goalpost two"}]
    page = render(recs, gps, title="t", solved={"g1": "iteration 4"},
                  bands={"lemma": (0.3, 0.7), "lift": (0.1, 0.5)})
    text = html.unescape(re.sub(r"<[^>]+>", " ", page))

    # The header counts: 4 proposals, 3 accepted, 2 of the 3 faithful, 1 of 2 goalposts solved.
    assert "4 proposals (3 accepted, 2/3 faithful); 1/2 goalposts solved" in text
    # g1 (solved) comes first with its badge; g2 is not solved.
    assert page.index("<h2>g1") < page.index("<h2>g2")
    assert "g1 solved at iteration 4" in " ".join(text.split())
    assert "g2 not solved" in " ".join(text.split())
    # The lift follows its lemma L1 and precedes L2; its text is escaped.
    i1, ix, i2 = (page.index(f'<tr id="{i}"') for i in ("L1", "X1", "L2"))
    assert i1 < ix < i2
    assert 'class="lift"' in page[ix:ix + 40]
    assert "a &lt;b&gt; &amp; c" in page
    # Band highlight: L1 (0.5 in the lemma band) and X1 (0.25 in the lift band), not L2 (0.9).
    def cell(i):
        row = page[page.index(f'<tr id="{i}"'):]
        return re.findall(r'<td class="([^"]*)">([^<]*)</td>', row[:row.index("</tr>")])[0]
    assert cell("L1") == ("band", "0.50") and cell("X1") == ("band", "0.25") and cell("L2") == ("", "0.90")
    # Trained and faithful marks; the rejected lemma shows its reason and no numbers.
    l1 = page[i1:page.index("</tr>", i1)]
    assert "accepted · trained" in l1 and '<span class="y">yes</span>' in l1
    l2 = page[i2:page.index("</tr>", i2)]
    assert '<span class="n">no</span>' in l2 and "trained" not in l2
    l3 = page[page.index('<tr id="L3"'):]
    l3 = l3[:l3.index("</tr>")]
    assert "rejected: duplicate" in l3 and 'class=" rej"' in l3


def test_a_goalpost_without_lemmas_says_so():
    page = render([], [{"id": "g9", "question": "q"}], title="t")
    assert "no lemma was written from this goalpost" in page
    assert "0 proposals (0 accepted); 0/1 goalposts solved" in page
