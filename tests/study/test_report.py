"""The study's report from saved evaluations: summaries, spread, the claim rule, markdown,
figure and the README section — values computed by hand from the synthetic counts."""

import math

import pytest

from selfplay_study import report
from selfplay_study.final_eval import summarize
from selfplay_study.protocol import Arm, FinalEval, Protocol


def _eval(hits: int, heldout_c: list[int], total_gp: int = 4):
    gps = {f"g{i}": [4, 1 if i < hits else 0] for i in range(total_gp)}
    held = {f"h{i}": [4, c] for i, c in enumerate(heldout_c)}
    return {"goalposts": gps, "heldout": held, "depth": {f"h{i}": 1 + i % 2 for i in range(len(heldout_c))}}


def test_summarize_by_hand():
    s = summarize(_eval(2, [4, 0, 2, 1]), ks=(1, 4))
    assert s["goalposts/hits"] == 2 and s["goalposts/total"] == 4
    assert s["goalposts/pass_rate"] == pytest.approx(2 / 16)
    assert s["heldout/pass@1"] == pytest.approx((1 + 0 + 0.5 + 0.25) / 4)
    assert s["heldout/pass@4"] == pytest.approx(3 / 4)
    assert s["heldout/d1/pass@1"] == pytest.approx((1 + 0.5) / 2)   # h0, h2
    assert s["heldout/d2/pass@1"] == pytest.approx((0 + 0.25) / 2)  # h1, h3


@pytest.mark.parametrize("a,b,want", [
    ([10, 11, 12], [5, 6, 7], 1),       # diff 5, se sqrt(1/3 + 1/3) = 0.82
    ([5, 6, 7], [10, 11, 12], -1),
    ([5, 7, 9], [5, 6, 7], 0),          # diff 1, se sqrt(4/3 + 1/3) = 1.29
    ([3, 3, 3], [3, 3, 3], 0),
    ([9], [1, 2, 3], None),             # one run has no spread: no claim either way
])
def test_claim_rule(a, b, want):
    assert report.separated(a, b) == want


def _protocol():
    return Protocol(arms=(Arm(name="base", label="start"), Arm(name="rlvr", label="RLVR", config="x.yaml"),
                          Arm(name="gasp", label="GASP", config="y.yaml")),
                    seeds=(0, 1), iterations=3, final=FinalEval(goalpost_k=4, heldout_n=4, ks=(1, 4)))


def _results():
    return {"base": [{"seed": 0, "eval": _eval(1, [1, 0, 0, 0])}, {"seed": 1, "eval": _eval(1, [0, 1, 0, 0])}],
            "rlvr": [{"seed": 0, "wall_s": 60, "eval": _eval(1, [4, 4, 0, 0])},
                     {"seed": 1, "wall_s": 120, "eval": _eval(2, [4, 4, 1, 0])}],
            "gasp": [{"seed": 0, "wall_s": 90, "eval": _eval(4, [1, 0, 0, 0])}]}


def test_rows_table_and_comparisons(tmp_path):
    proto = _protocol()
    rows = report.arm_rows(proto, _results())
    rlvr = rows[1]
    assert rlvr["goalposts/hits"] == (1.5, pytest.approx(math.sqrt(0.5)))
    assert rlvr["goalposts/union"] == 2
    md = report.markdown_table(proto, rows)
    assert "| RLVR | 2 | 1.5 ± 0.7 |" in md and "| 1.5 |" in md    # 90 s and (60+120)/2 s
    assert "| GASP | 1 | 4.0 |" in md                               # one run: no spread shown
    claims = "\n".join(report.comparisons(rows, ks=(1, 4)))
    assert "RLVR: goalpost hits not separated from the floor" in claims
    assert "RLVR: goalpost hits not separated from the floor; pass@1 above the floor" in claims
    png = report.figure(proto, rows, tmp_path / "s.png")
    assert png.stat().st_size > 10_000


def test_readme_section_is_inserted_then_replaced(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n### Does the loop learn? (toy world)\n\nold text\n\n## Layout\n")
    assert report.replace_readme_section(readme, "table one")
    text = readme.read_text()
    assert text.index("### Does the loop learn?") < text.index("table one") < text.index("old text")
    assert report.replace_readme_section(readme, "table two")
    text = readme.read_text()
    assert "table one" not in text and text.count(report.README_BEGIN) == 1 and "table two" in text
    assert not report.replace_readme_section(readme, "table two")


def test_method_diagnostics_by_hand():
    proto = Protocol(arms=(Arm(name="r", label="R-Zero", config="x.yaml",
                               diagnostics=("acc", "missing")),), seeds=(0, 1),
                     final=FinalEval(heldout_n=4, ks=(1, 4)))
    results = {"r": [
        {"seed": 0, "eval": _eval(1, [4, 0]), "diagnostics": {"acc": [[1, 0.8], [2, 0.6]], "missing": []}},
        {"seed": 1, "eval": _eval(1, [4, 0]), "diagnostics": {"acc": [[1, 0.4], [2, 0.2], [3, 0.3]]}},
    ]}
    d = report.arm_rows(proto, results)[0]["diagnostics"]
    # run means 0.7 and 0.3: mean 0.5, sample sd sqrt(2 * 0.2^2) = 0.2828; first (0.8 + 0.4) / 2,
    # last (0.6 + 0.3) / 2
    assert d["acc"]["runs"] == 2
    assert d["acc"]["mean"][0] == pytest.approx(0.5) and d["acc"]["mean"][1] == pytest.approx(0.28284, abs=1e-5)
    assert d["acc"]["first"] == pytest.approx(0.6) and d["acc"]["last"] == pytest.approx(0.45)
    assert d["missing"]["runs"] == 0
    table = report.diagnostics_table(report.arm_rows(proto, results))
    assert "| R-Zero | `acc` | 2 | 0.500 ± 0.283 | 0.600 -> 0.450 |" in table
    assert "| R-Zero | `missing` | 0 | not logged | - |" in table


def test_the_figure_title_says_when_a_study_was_cut_short():
    proto = _protocol()
    trained = [a.name for a in proto.arms if a.trains]
    n = len(proto.seeds)
    full = [{"arm": "base", "n": 3}] + [{"arm": a, "n": n} for a in trained]
    assert report.figure_title(proto, full).startswith(f"{proto.name}: {n} seeds x ")
    cut = [{"arm": "base", "n": 3}, {"arm": trained[0], "n": 1}] + [{"arm": a, "n": 0} for a in trained[1:]]
    assert report.figure_title(proto, cut).startswith(f"{proto.name}: 1 of {n} seeds run x ")


def test_the_figure_reads_when_no_run_hit_a_goalpost(tmp_path):
    """All-zero hits were drawn on a +-1e-17 axis (the 4 Dec depth-5-sources study): the hits
    panel starts at 0, shows at least one goalpost, and ticks whole goalposts."""
    proto = _protocol()
    zero = {k: [{"seed": s, "wall_s": 60, "eval": _eval(0, [0, 0, 0, 0])} for s in (0, 1)]
            for k in ("rlvr", "gasp")}
    zero["base"] = [{"seed": s, "wall_s": 0, "eval": _eval(0, [0, 0, 0, 0])} for s in (0, 1, 2)]
    rows = report.arm_rows(proto, zero)
    fig = report.draw_figure(proto, rows)
    hits, p1 = fig.axes[0], fig.axes[1]
    assert hits.get_ylim() == (0.0, 1.0)
    assert all(float(t).is_integer() for t in hits.get_yticks())
    assert p1.get_ylim()[0] == 0.0 and p1.get_ylim()[1] >= 0.05
    # with hits, the axis covers the largest value
    rows = report.arm_rows(proto, _results())
    top = max(v for r in rows for v in r["goalposts/hits:values"])
    assert report.draw_figure(proto, rows).axes[0].get_ylim()[1] >= top


def test_a_study_without_the_base_arm_draws_no_empty_legend(recwarn):
    """A study of one trained arm (compared later with another study's floor) has no floor
    line: the hits panel gets no legend, and matplotlib no 'no artists' warning."""
    proto = _protocol().select(["gasp"])
    rows = report.arm_rows(proto, {"gasp": [{"seed": s, "wall_s": 60, "eval": _eval(1, [1, 2])}
                                            for s in (0, 1)]})
    fig = report.draw_figure(proto, rows)
    assert fig.axes[0].get_legend() is None
    assert not [w for w in recwarn if "legend" in str(w.message)]
    with_base = report.draw_figure(_protocol(), report.arm_rows(_protocol(), _results()))
    assert [t.get_text() for t in with_base.axes[0].get_legend().get_texts()] == ["start checkpoint (floor)"]


def test_an_arm_with_nothing_to_compare_with_says_so():
    proto = _protocol().select(["gasp"])
    rows = report.arm_rows(proto, {"gasp": [{"seed": 0, "wall_s": 60, "eval": _eval(1, [1, 2])}]})
    assert report.comparisons(rows) == [
        "* GASP: no floor or RLVR in this study to compare with (`selfplay study --merge` joins "
        "it to a study that has them)"]


def test_the_report_names_its_budget_against_make_runs():
    """A study at another budget than `make run`'s 12 iterations says so instead of calling its
    budget `make run`'s."""
    from selfplay_study.runner import study_markdown
    rows = report.arm_rows(_protocol(), _results())
    at_12 = _protocol().model_copy(update={"iterations": 12})
    at_24 = _protocol().model_copy(update={"iterations": 24})
    assert "12 iterations each (the `make run` budget)" in study_markdown(at_12, rows)
    md = study_markdown(at_24, rows)
    assert "24 iterations each (2x the `make run` budget of 12)" in md
    assert "(the `make run` budget)" not in md
