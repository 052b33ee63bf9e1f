import struct

import pytest

from selfplay_core.tracking.plots import (
    NOT_EVALUATED, SOLVED, UNSOLVED, curves, draw_goalpost_heatmap, goalpost_groups,
    goalpost_heatmap, heatmap_layout,
)


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


# A run of 4 iterations, goalposts evaluated at 0, 2 and 4 (k = 8): two depth-4 goalposts and
# one of depth 3, listed out of order on purpose.
IDS = ["toy/goalpost_pool/d4/0007", "toy/goalpost_pool/d3/0001", "toy/goalpost_pool/d4/0002"]
GROUPS = ["depth 4", "depth 3", "depth 4"]
LABELS = ["base", "iter 2", "iter 4"]
MATRIX = [[0.0, 0.0, 0.0],        # base: nothing solved
          [0.25, 0.0, 0.0],       # iter 2: d4/0007 passes 2 of 8
          [0.0, 0.0, 0.125]]      # iter 4: d4/0002 passes 1 of 8 (d4/0007 lost again)


def test_layout_groups_by_depth_lays_out_the_timeline_and_adds_the_union():
    lay = heatmap_layout(MATRIX, LABELS, IDS, groups=GROUPS, k=8, iterations=4)
    # Rows: depth 3 first, then depth 4 in id order; the shared prefix is dropped from labels.
    assert lay.row_labels == ["d3/0001", "d4/0002", "d4/0007"]
    assert lay.groups == [("depth 3", 0, 1), ("depth 4", 1, 2)]
    # Columns: every iteration 0..4 (1 and 3 had no goalpost evaluation), then the union.
    assert lay.col_labels == ["0", "1", "2", "3", "4", "union"]
    N, U, S = NOT_EVALUATED, UNSOLVED, SOLVED
    assert lay.cells == [[U, N, U, N, U, U],      # d3/0001: never solved
                         [U, N, U, N, S, S],      # d4/0002: solved at 4
                         [U, N, S, N, U, S]]      # d4/0007: solved at 2 only; union keeps it
    assert lay.passes[1][4] == 1 and lay.passes[2][2] == 2 and lay.passes[0][1] is None
    assert (lay.solved_last, lay.solved_union, lay.total) == (1, 2, 3)


def test_iterations_still_to_come_are_not_evaluated():
    lay = heatmap_layout(MATRIX[:2], LABELS[:2], IDS, groups=GROUPS, k=8, iterations=6)
    assert lay.col_labels == ["0", "1", "2", "3", "4", "5", "6", "union"]
    assert [row[3:7] for row in lay.cells] == [[NOT_EVALUATED] * 4] * 3
    assert lay.solved_last == 1  # the last evaluated checkpoint is iteration 2


def test_without_a_timeline_the_columns_are_the_checkpoints():
    lay = heatmap_layout(MATRIX, ["a", "b", "c"], IDS, iterations=4)
    assert lay.col_labels == ["a", "b", "c", "union"]
    assert lay.groups == [("", 0, 3)]
    assert lay.row_labels == ["d3/0001", "d4/0002", "d4/0007"]  # id order without groups


def test_a_missing_value_is_not_evaluated():
    lay = heatmap_layout([[0.0, None, float("nan")]], ["base"], IDS)
    # Rows in id order: d3/0001 (None), d4/0002 (NaN), d4/0007 (0.0).
    assert [row[0] for row in lay.cells] == [NOT_EVALUATED, NOT_EVALUATED, UNSOLVED]


def test_a_matrix_of_the_wrong_shape_is_refused():
    with pytest.raises(ValueError, match="expected 2 checkpoints x 3 goalposts"):
        heatmap_layout([[0.0] * 3], ["base", "iter 1"], IDS)


def test_groups_follow_problem_metadata():
    class P:
        def __init__(self, **meta):
            self.metadata = meta

    assert goalpost_groups([P(depth=3), P(difficulty="hard"), P()]) == ["depth 3", "hard", ""]


def test_figure_has_the_discrete_legend_group_labels_and_union():
    lay = heatmap_layout(MATRIX, LABELS, IDS, groups=GROUPS, k=8, iterations=4)
    fig = draw_goalpost_heatmap(lay, title="gasp seed 0: goalposts solved", k=8)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "solved: at least 1 of 8 samples passes (number = how many)",
        "unsolved: every sample fails", "not evaluated at this iteration"]
    assert len(fig.axes) == 1  # a legend, not a colour bar
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1", "2", "3", "4", "union"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["d3/0001", "d4/0002", "d4/0007"]
    assert all(t.get_rotation() == 0 for t in ax.get_xticklabels() + ax.get_yticklabels())
    notes = {t.get_text() for t in ax.texts}
    assert {"depth 3\n0 of 1\nsolved", "depth 4\n2 of 2\nsolved"} <= notes
    assert {"1", "2"} <= notes  # passing samples written in the solved cells
    assert "last checkpoint: 1 of 3 solved; union: 2 of 3" in ax.get_title()
    # The image holds the categories, drawn with three fixed colours.
    img = ax.get_images()[0]
    assert img.get_array().tolist() == lay.cells
    rgba = {tuple(round(x, 3) for x in img.cmap(img.norm(v))) for v in (0, 1, 2)}
    assert len(rgba) == 3
    import matplotlib.pyplot as plt
    plt.close(fig)


def test_heatmap_png_grows_with_the_goalposts_and_keeps_readable_rows(tmp_path):
    ids = [f"toy/goalpost_pool/d3/{i:04d}" for i in range(40)]
    small = goalpost_heatmap([[0.0] * 10, [0.1] + [0.0] * 9], ["base", "iter 1"], ids[:10],
                             tmp_path / "a.png", k=16, iterations=2)
    big = goalpost_heatmap([[0.0] * 40, [0.1] + [0.0] * 39], ["base", "iter 1"], ids,
                           tmp_path / "b.png", k=16, iterations=2)
    (w1, h1), (w2, h2) = png_size(small), png_size(big)
    # Rows, not columns, take the goalposts: 4x the goalposts is a taller, not wider, picture,
    # with at least ~20 px per row.
    assert h2 > h1 + 30 * 20 and abs(w1 - w2) < 0.2 * w1


def test_curves_png(tmp_path):
    p = curves({"gasp": [(0, 0.1), (1, 0.3)], "rlvr": [(0, 0.1), (1, 0.2)]}, tmp_path / "c.png", "pass@1")
    assert png_size(p)[0] > 100


def test_the_floor_is_drawn_under_the_matrix_against_the_goalposts_solved():
    """A run whose start model solves 1.25 goalposts by chance (5.0 over all its checks): the
    figure draws both levels as lines beside bars of the goalposts solved per checkpoint, so a
    green cell never reads as a gain on its own."""
    lay = heatmap_layout(MATRIX, LABELS, IDS, groups=GROUPS, k=8, iterations=4, floor=1.25, floor_union=5.0)
    # Solved per column, from the matrix above: 0 at 0, 1 at 2, 1 at 4, union 2; 1 and 3 not evaluated.
    assert lay.solved_per_col == [0, None, 1, None, 1, 2]
    fig = draw_goalpost_heatmap(lay, title="gasp seed 0: goalposts solved", k=8)
    heat, strip = fig.axes
    assert "last checkpoint: 1 of 3 solved (floor 1.25); union: 2 of 3 (floor 5.00)" in heat.get_title()
    assert [round(b.get_height()) for b in strip.patches] == [0, 1, 1, 2]
    assert [round(b.get_x() + b.get_width() / 2) for b in strip.patches] == [0, 2, 4, 5]
    floors = {}
    for coll in strip.collections:  # the dashed floor lines: (y, x from, x to)
        (a, b), = [seg.tolist() for seg in coll.get_segments()]
        floors[round(a[1], 2)] = (a[0], b[0])
    assert floors == {1.25: (-0.5, 4.5), 5.0: (4.5, 5.5)}  # the timeline, then the union column
    assert [t.get_text().split(":")[0] for t in strip.get_legend().get_texts()] == [
        "floor 1.25", "union floor 5.00", "goalposts solved"]
    import matplotlib.pyplot as plt
    plt.close(fig)
