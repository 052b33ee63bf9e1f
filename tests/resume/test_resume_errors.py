"""Corrupt or missing run state and checkpoints: a clear error naming the file and the last good
iteration, never a silent restart from zero; checkpoints written atomically; a checkpoint whose
local copy is gone comes back from the checkpoint store, verified. No model needed: the
checkpoints here hold small stand-in files, which is all the verification looks at."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from selfplay_core.config import dump_config, load_config
from selfplay_core import checkpoints as C
from selfplay_core.loop.driver import check_resumable, run_selfplay, started_by
from selfplay_core.state import RunState, StateError, load_state, save_state
from selfplay_core.storage import open_store

ROOT = Path(__file__).resolve().parents[2]


def _files(payload: bytes):
    def save(d: Path) -> None:
        (d / "model.safetensors").write_bytes(payload * 1000)
        (d / "config.json").write_text('{"model_type": "qwen2"}')
        (d / "sub").mkdir()
        (d / "sub" / "extra.bin").write_bytes(b"x" * 10)
    return save


def make_run(tmp_path: Path, store: str | None = None, finished: bool = False):
    """A run directory as the driver leaves it after iteration 2 (of 3)."""
    over = [f"out_dir={tmp_path}", "tracking.run_name=r", "iterations=3"]
    if store:
        over.append(f"tracking.checkpoint_store={store}")
    cfg = load_config(None, over)
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(dump_config(cfg))
    C.write_checkpoint(run_dir, 1, _files(b"one"))
    ck = C.write_checkpoint(run_dir, 2, _files(b"two"))
    st = RunState(run_id="abc", iteration=2, last_checkpoint="checkpoints/iter-0002",
                  checkpoint_sha256=ck.manifest_sha256, metrics_logged_through=2, finished=finished)
    if store:
        st.checkpoint_key = C.store_key("abc", 2)
        st.checkpoint_uri = C.upload(open_store(store), ck, st.checkpoint_key)
    save_state(st, run_dir / "state.json")
    C.prune(run_dir, keep=ck.path)
    return cfg, run_dir, ck


def cli_resume(run_dir: Path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "selfplay_cli.main", "run", "--resume", str(run_dir),
                           "--no-prefect"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)


def assert_one_line(r, *needles):
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("selfplay run: error:")]
    assert len(lines) == 1, r.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


# ---- the run state ---------------------------------------------------------------------------

def test_truncated_state_names_the_file_and_the_last_good_iteration_in_the_cli(tmp_path):
    _, run_dir, ck = make_run(tmp_path)
    p = run_dir / "state.json"
    p.write_bytes(p.read_bytes()[:100])
    line = assert_one_line(cli_resume(run_dir), str(p), "corrupt", "last good iteration on disk is 2",
                           str(ck.path), "refusing to restart from zero")
    print(line)


def test_missing_state_names_the_file_and_the_last_good_iteration(tmp_path):
    _, run_dir, ck = make_run(tmp_path)
    (run_dir / "state.json").unlink()
    with pytest.raises(StateError) as e:
        load_state(run_dir / "state.json")
    msg = str(e.value)
    assert str(run_dir / "state.json") in msg and "not found" in msg
    assert "last good iteration on disk is 2" in msg and str(ck.path) in msg


def test_missing_state_and_no_checkpoint_says_so(tmp_path):
    with pytest.raises(StateError, match="no intact checkpoint.*last good iteration is unknown"):
        load_state(tmp_path / "state.json")


@pytest.mark.parametrize("edit", [
    lambda d: {**d, "iteration": "two"},
    lambda d: {**d, "iteration": 2, "last_checkpoint": None},
    lambda d: {**d, "surprise": 1},
    lambda d: [d],
    lambda d: {**d, "rng_state": [3, "x"]},
])
def test_well_formed_json_that_is_no_run_state_is_corrupt(tmp_path, edit):
    _, run_dir, _ = make_run(tmp_path)
    p = run_dir / "state.json"
    p.write_text(json.dumps(edit(json.loads(p.read_text()))))
    with pytest.raises(StateError, match=r"state\.json: run state is corrupt .*last good iteration on disk is 2"):
        load_state(p)


# ---- the checkpoint --------------------------------------------------------------------------

def test_state_pointing_to_a_missing_checkpoint_in_the_cli(tmp_path):
    _, run_dir, ck = make_run(tmp_path)
    import shutil
    shutil.rmtree(ck.path)
    assert_one_line(cli_resume(run_dir), str(ck.path), "not found",
                    "iteration 2 is the last good one", "no checkpoint store holds a copy")


def test_a_changed_byte_in_a_checkpoint_file_names_that_file(tmp_path):
    cfg, run_dir, ck = make_run(tmp_path)
    f = ck.path / "sub" / "extra.bin"
    data = bytearray(f.read_bytes())
    data[3] ^= 1
    f.write_bytes(bytes(data))
    with pytest.raises(StateError) as e:
        check_resumable(run_dir, cfg)
    msg = str(e.value)
    assert str(f) in msg and "corrupt" in msg and "iteration 2 is the last good one" in msg


def test_a_missing_checkpoint_file_or_a_swapped_checkpoint_is_refused(tmp_path):
    cfg, run_dir, ck = make_run(tmp_path)
    (ck.path / "config.json").unlink()
    with pytest.raises(StateError, match=r"config\.json: checkpoint file missing"):
        check_resumable(run_dir, cfg)
    # A complete, self-consistent checkpoint that is not the one the state was saved with.
    other = C.write_checkpoint(tmp_path / "other", 2, _files(b"TWO"))
    import shutil
    shutil.rmtree(ck.path)
    shutil.copytree(other.path, ck.path)
    with pytest.raises(StateError, match="does not match the sha256 recorded in the run state"):
        check_resumable(run_dir, cfg)
    C.verify_checkpoint(ck.path)  # on its own it is fine


def test_a_fresh_run_never_replaces_an_unfinished_one(tmp_path):
    cfg, run_dir, ck = make_run(tmp_path)
    with pytest.raises(StateError, match=f"{run_dir} holds an unfinished run .2 iterations done.*--resume"):
        run_selfplay(cfg, run_dir=run_dir)
    assert ck.path.is_dir() and load_state(run_dir / "state.json").iteration == 2
    (run_dir / "state.json").write_text("{")
    with pytest.raises(StateError, match="corrupt"):
        run_selfplay(cfg, run_dir=run_dir)


def test_started_by_recognises_only_its_own_run(tmp_path):
    _, run_dir, _ = make_run(tmp_path)
    st = load_state(run_dir / "state.json")
    st.run_key = "prefect-flow-run:1"
    save_state(st, run_dir / "state.json")
    assert started_by(run_dir, "prefect-flow-run:1")
    assert not started_by(run_dir, "prefect-flow-run:2")
    assert not started_by(tmp_path / "nowhere", "prefect-flow-run:1")
    (run_dir / "state.json").write_text("{")
    with pytest.raises(StateError):
        started_by(run_dir, "prefect-flow-run:1")


# ---- atomic writes -----------------------------------------------------------------------------

def test_a_checkpoint_write_that_dies_leaves_the_previous_one_and_no_new_folder(tmp_path):
    cfg, run_dir, ck = make_run(tmp_path)

    def dies(d: Path) -> None:
        (d / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        C.write_checkpoint(run_dir, 3, dies)
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["iter-0002"]
    # What a SIGKILL can leave: a temp folder, or a renamed iter-0003 whose state was never saved.
    (run_dir / "checkpoints" / ".tmp-iter-0003-999").mkdir()
    (run_dir / "checkpoints" / ".tmp-iter-0003-999" / "model.safetensors").write_bytes(b"half")
    C.write_checkpoint(run_dir, 3, _files(b"three-old"))
    assert check_resumable(run_dir, cfg).iteration == 2  # the state still points at iter-0002
    # The retried iteration 3 replaces the orphan; pruning (after its state is saved) clears the rest.
    new = C.write_checkpoint(run_dir, 3, _files(b"three"))
    C.prune(run_dir, keep=new.path)
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["iter-0003"]
    assert (new.path / "model.safetensors").read_bytes() == b"three" * 1000


# ---- the checkpoint store ---------------------------------------------------------------------

def test_a_lost_local_checkpoint_is_fetched_from_the_store_and_verified(tmp_path):
    store = tmp_path / "store"
    cfg, run_dir, ck = make_run(tmp_path, store=str(store))
    st = load_state(run_dir / "state.json")
    assert st.checkpoint_uri == str(store / "abc" / "checkpoints" / "iter-0002")
    want = (ck.path / "model.safetensors").read_bytes()
    import shutil
    shutil.rmtree(ck.path)
    check_resumable(run_dir, cfg)
    assert (ck.path / "model.safetensors").read_bytes() == want
    C.verify_checkpoint(ck.path, st.checkpoint_sha256)
    # A damaged local copy is replaced by the stored one, too.
    (ck.path / "model.safetensors").write_bytes(b"garbage")
    check_resumable(run_dir, cfg)
    assert (ck.path / "model.safetensors").read_bytes() == want


def test_a_corrupt_stored_copy_is_an_error_naming_it(tmp_path):
    store = tmp_path / "store"
    cfg, run_dir, ck = make_run(tmp_path, store=str(store))
    import shutil
    shutil.rmtree(ck.path)
    stored = store / "abc" / "checkpoints" / "iter-0002" / "model.safetensors"
    stored.write_bytes(b"rot")
    with pytest.raises(StateError) as e:
        check_resumable(run_dir, cfg)
    msg = str(e.value)
    assert str(ck.path) in msg and str(stored) in msg and "iteration 2 is the last good one" in msg
    assert not ck.path.exists()  # nothing half-fetched left behind


def test_a_fresh_run_replaces_a_finished_one(tmp_path):
    """Replacing happens before anything is built: the run then fails on the missing stand-in
    model, after the old state and checkpoints are gone."""
    cfg, run_dir, ck = make_run(tmp_path, finished=True)
    cfg = load_config(None, [f"out_dir={tmp_path}", "tracking.run_name=r", f"model.path={tmp_path}/no-model"])
    with pytest.raises(Exception) as e:
        run_selfplay(cfg, run_dir=run_dir)
    assert not isinstance(e.value, StateError)
    assert not (run_dir / "state.json").exists() and not ck.path.exists()
