import pytest

from selfplay_core.buffers import BufferItem, TaskBuffer, hashed_ngram_embedder

BASE_Q = "Given a list of integers, return the sum of the even numbers."
BASE_C = "def f(x):\n    return sum(v for v in x if v % 2 == 0)\n"


def item(i, q=BASE_Q, c=BASE_C, **kw):
    return BufferItem(id=str(i), kind="lemma", question=q, code=c, **kw)


def test_identical_and_reformatted_proposals_are_near_duplicates():
    buf = TaskBuffer()
    buf.add(item(0))
    assert buf.is_near_duplicate(BASE_Q + "\n" + BASE_C)[0]
    spaced = BASE_Q.replace(" ", "  ") + "\n" + BASE_C.replace("    ", "\t")
    assert buf.is_near_duplicate(spaced)[0]


def test_different_tasks_are_not():
    buf = TaskBuffer()
    buf.add(item(0))
    other = "Reverse the string and drop every vowel.\ndef f(x):\n    return ''.join(c for c in x[::-1] if c not in 'aeiou')\n"
    dup, sim = buf.is_near_duplicate(other)
    assert not dup and sim < 0.6


def test_small_edit_is_similar_but_below_a_strict_threshold():
    buf = TaskBuffer(threshold=0.999)
    buf.add(item(0))
    edited = BASE_Q.replace("even", "odd") + "\n" + BASE_C.replace("== 0", "== 1")
    dup, sim = buf.is_near_duplicate(edited)
    assert not dup and 0.7 < sim < 0.999


def test_batch_mates_count_as_duplicates_too():
    buf = TaskBuffer()
    assert buf.is_near_duplicate("abc def ghi", extra=["abc def ghi"])[0]


def test_embedder_is_deterministic_and_normalized():
    e = hashed_ngram_embedder(dim=256)
    a, b = e(["hello world"]), e(["hello world"])
    assert (a == b).all()
    assert abs(float((a * a).sum()) - 1.0) < 1e-5


def test_diversity_and_round_trip_with_provenance():
    buf = TaskBuffer()
    buf.add(item(0, goalpost_id="g1", axis="io", inputs=[[(1, 2)]], outputs=[{1: 2}]))
    buf.add(item(1, q="Count the vowels in a string.", c="def f(s):\n    return sum(c in 'aeiou' for c in s)\n",
                 parent_id="0", axis="f"))
    assert 0.3 < buf.diversity() <= 1.5
    back = TaskBuffer.from_json(buf.to_json())
    assert [i.to_json() for i in back] == [i.to_json() for i in buf]
    assert back.items[0].inputs == [[(1, 2)]] and back.items[0].outputs == [{1: 2}]
    assert back.nearest(BASE_Q + "\n" + BASE_C)[1].id == "0"


def test_empty_buffer():
    buf = TaskBuffer()
    assert buf.nearest("x") == (0.0, None) and buf.diversity() == 0.0


def test_kinds_restrict_the_gate_and_extra_text_replaces_question_and_code():
    buf = TaskBuffer()
    buf.add(BufferItem(id="d", kind="azr_deduction", question="", code=BASE_C,
                       extra={"text": BASE_C + "\n[1, 2, 3]"}))
    assert buf.is_near_duplicate(BASE_C + "\n[1, 2, 3]", kinds=("azr_deduction",))[0]
    assert buf.nearest(BASE_C + "\n[1, 2, 3]", kinds=("azr_abduction",)) == (0.0, None)
    assert not buf.is_near_duplicate(BASE_C + "\n[1, 2, 3]", kinds=("azr_abduction",))[0]
    back = TaskBuffer.from_json(buf.to_json())
    assert back.items[0].text() == BASE_C + "\n[1, 2, 3]"
