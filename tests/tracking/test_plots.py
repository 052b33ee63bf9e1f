import struct

from selfplay_core.tracking.plots import curves, goalpost_heatmap


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_heatmap_is_a_png_that_grows_with_the_matrix(tmp_path):
    gps = [f"g{i}" for i in range(40)]
    small = goalpost_heatmap([[0.0] * 40, [0.1] + [0.0] * 39], ["base", "it1"], gps, tmp_path / "a.png")
    big = goalpost_heatmap([[0.0] * 40] * 12, [f"it{i}" for i in range(12)], gps, tmp_path / "b.png")
    w1, h1 = png_size(small)
    w2, h2 = png_size(big)
    assert h2 > h1 and abs(w1 - w2) < 0.2 * w1


def test_curves_png(tmp_path):
    p = curves({"gasp": [(0, 0.1), (1, 0.3)], "rlvr": [(0, 0.1), (1, 0.2)]}, tmp_path / "c.png", "pass@1")
    assert png_size(p)[0] > 100
