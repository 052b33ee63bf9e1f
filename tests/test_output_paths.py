"""Output paths are checked before the long work that fills them: a folder that cannot be written
is one line naming it, exit 2, before anything trains, samples or mines; a folder of the user's
is never replaced. Unwritable here means "beneath a regular file", which fails for root too."""

import gzip
import json
from pathlib import Path

import pytest

from selfplay_cli.main import main
from selfplay_core.output_paths import (OutputPathError, check_output_dir, check_output_file,
                                        check_replaceable_dir, ensure_output_dir)
from selfplay_core.problems import InputError, load_problems


@pytest.fixture
def a_file(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("the user's notes\n")
    return f


# -- the checks ------------------------------------------------------------------------------------

def test_ensure_output_dir_makes_nested_folders_and_leaves_nothing_in_them(tmp_path):
    p = ensure_output_dir(tmp_path / "a" / "b", "--out")
    assert p.is_dir() and list(p.iterdir()) == []


@pytest.mark.parametrize("name, message", [("file", "exists and is not a folder"),
                                           ("beneath", "its folder .*notes.txt is not a folder")])
def test_ensure_output_dir_refuses(a_file, name, message):
    path = a_file if name == "file" else a_file / "sub"
    with pytest.raises(OutputPathError, match=message) as e:
        ensure_output_dir(path, "--out")
    assert str(e.value).startswith(f"--out {path}:")
    assert a_file.read_text() == "the user's notes\n"


def test_check_output_dir_checks_without_making_anything(tmp_path, a_file):
    assert check_output_dir(tmp_path / "runs" / "a", "out_dir") == tmp_path / "runs" / "a"
    assert check_output_dir(tmp_path, "out_dir") == tmp_path
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    with pytest.raises(OutputPathError, match="exists and is not a folder"):
        check_output_dir(a_file, "out_dir")
    with pytest.raises(OutputPathError, match="notes.txt is not a folder"):
        check_output_dir(a_file / "runs" / "a", "out_dir")


def test_check_output_file_checks_without_making_anything(tmp_path, a_file):
    target = tmp_path / "new" / "deeper" / "v.jsonl"
    assert check_output_file(target, "--out") == target
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    with pytest.raises(OutputPathError, match="is a folder; give a file path"):
        check_output_file(tmp_path, "--out")
    for beneath in (a_file / "v.jsonl", a_file / "sub" / "v.jsonl"):
        with pytest.raises(OutputPathError, match=f"^--out {beneath}: its folder {a_file} is not a folder"):
            check_output_file(beneath, "--out")


def test_check_replaceable_dir_refuses_a_users_folder_and_allows_an_earlier_result(tmp_path):
    assert check_replaceable_dir(tmp_path / "absent", "--out", "bootstrap.json")
    (tmp_path / "empty").mkdir()
    assert check_replaceable_dir(tmp_path / "empty", "--out", "bootstrap.json")
    earlier = tmp_path / "model"
    earlier.mkdir()
    (earlier / "bootstrap.json").write_text("{}")
    (earlier / "config.json").write_text("{}")
    assert check_replaceable_dir(earlier, "--out", "bootstrap.json")
    users = tmp_path / "mine"
    users.mkdir()
    (users / "data.csv").write_text("1,2\n")
    with pytest.raises(OutputPathError, match="other files in it .no bootstrap.json"):
        check_replaceable_dir(users, "--out", "bootstrap.json")
    assert (users / "data.csv").read_text() == "1,2\n"


# -- every command that writes, before its work ----------------------------------------------------

def _one_line_error(capsys, command, *needles):
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"selfplay {command}: error: "), err
    assert "\n" not in err and "Traceback" not in err, err
    for n in needles:
        assert n in err, err


def test_bootstrap_into_a_users_folder_is_refused_and_the_folder_kept(tmp_path, capsys, monkeypatch):
    users = tmp_path / "results"
    users.mkdir()
    (users / "table.csv").write_text("keep\n")
    # A spy, not a fault: the corpus is the first long step, and the refusal must come before it.
    import selfplay_core.toyworld.bootstrap as bootstrap
    built = []
    monkeypatch.setattr(bootstrap, "build_corpus", lambda *a, **k: built.append(1) or [])
    assert main(["bootstrap", "--no-prefect", "--examples", "150", "--out", str(users)]) == 2
    _one_line_error(capsys, "bootstrap", str(users), "give a new or empty folder")
    with pytest.raises(OutputPathError):
        bootstrap.bootstrap_toy_model(bootstrap.BootstrapConfig(n_examples=150), out_dir=users)
    assert built == [] and (users / "table.csv").read_text() == "keep\n"
    assert sorted(p.name for p in users.iterdir()) == ["table.csv"]


def test_run_refuses_an_out_dir_it_cannot_write(a_file, capsys):
    from selfplay_core.config import load_config
    from selfplay_core.loop.driver import run_selfplay

    assert main(["run", "--set", f"out_dir={a_file / 'runs'}", "--set", "iterations=1"]) == 2
    _one_line_error(capsys, "run", "out_dir", "notes.txt is not a folder")
    # The flows call the driver directly: it checks the run folder before the model loads.
    with pytest.raises(OutputPathError, match="the run folder"):
        run_selfplay(load_config(None, [f"out_dir={a_file / 'runs'}"]))


def test_study_refuses_its_folder_and_names_a_bad_seed_list(a_file, capsys):
    assert main(["study", "--out", str(a_file), "--arms", "base,rlvr", "--seeds", "0"]) == 2
    _one_line_error(capsys, "study", "--out", "exists and is not a folder")
    with pytest.raises(SystemExit) as e:
        main(["study", "--out", str(a_file.parent / "s"), "--seeds", "0,one"])
    assert e.value.code == 2
    assert "argument --seeds: expected comma-separated whole numbers" in capsys.readouterr().err


def test_evaluate_verify_convert_and_compare_refuse_before_working(tmp_path, a_file, capsys):
    samples = tmp_path / "s.jsonl"
    samples.write_text(json.dumps({"problem_id": "HumanEval/0", "sample_id": 0, "code": "x"}) + "\n")
    assert main(["evaluate", "--benchmark", "humanevalplus", "--samples", str(samples),
                 "--out", str(a_file / "eval")]) == 2
    _one_line_error(capsys, "evaluate", "--out", "notes.txt is not a folder")
    assert main(["verify", "--problems", "examples/problems.jsonl", "--samples",
                 "examples/samples.jsonl", "--out", str(tmp_path)]) == 2
    _one_line_error(capsys, "verify", "is a folder; give a file path")
    assert main(["convert", "humanevalplus", "--out", str(a_file / "sub" / "p.jsonl")]) == 2
    _one_line_error(capsys, "convert", "--out", "notes.txt is not a folder")
    assert main(["compare", "some-run", "--png", str(a_file / "c.png")]) == 2
    _one_line_error(capsys, "compare", "--png")


def test_mining_and_checkpoint_evaluation_check_their_folder_first(a_file):
    from selfplay_core.checkpoint_eval import CheckpointEvalConfig, run_checkpoint_eval
    from selfplay_core.mining import GoalpostMiningConfig, run_mining

    with pytest.raises(OutputPathError, match="the mining folder"):
        run_mining(GoalpostMiningConfig(model_path=str(a_file.parent / "no-model"),
                                        out_dir=str(a_file / "m")))
    with pytest.raises(OutputPathError, match="the evaluation folder"):
        run_checkpoint_eval(CheckpointEvalConfig(checkpoint=str(a_file.parent / "no-model"),
                                                 out_dir=str(a_file / "e")))


# -- inputs: gzip-compressed problems, bytes that are not text -------------------------------------

def test_problems_read_from_gzip_as_from_plain_text(tmp_path):
    plain = Path(__file__).resolve().parents[1] / "examples" / "problems.jsonl"
    packed = tmp_path / "problems.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    got, want = load_problems(str(packed)), load_problems(str(plain))
    assert list(got) == list(want) and len(want) >= 4
    assert all(got[k].to_json() == want[k].to_json() for k in want)


def test_input_that_is_not_text_or_not_converted_is_one_clear_error(tmp_path):
    binary = tmp_path / "p.jsonl"
    good = json.dumps({"id": "a", "kind": "call", "entry_point": "f",
                       "tests": [{"args": [1], "expected": 1}]}).encode()
    binary.write_bytes(good + b"\n\xff\xfe\x00garbage\n")
    with pytest.raises(InputError, match=r"p.jsonl:2: not UTF-8 text"):
        load_problems(str(binary))
    raw = tmp_path / "he.jsonl"
    raw.write_text(json.dumps({"task_id": "HumanEval/0", "prompt": "def f():"}) + "\n")
    with pytest.raises(InputError, match="selfplay convert"):
        load_problems(str(raw))


# -- other bad input found next to these, refused before work --------------------------------------

def test_a_study_without_a_training_arm_or_budget_is_refused_before_its_folder(tmp_path, capsys):
    out = tmp_path / "study"
    assert main(["study", "--out", str(out), "--arms", "base", "--seeds", "0"]) == 2
    _one_line_error(capsys, "study", "--arms base: no training arm", "--arms base,rlvr")
    assert not out.exists()
    with pytest.raises(SystemExit) as e:   # was read as "not given" and ran 12 iterations
        main(["study", "--out", str(out), "--arms", "base,rlvr", "--iterations", "0"])
    assert e.value.code == 2 and "argument --iterations: expected a whole number >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("model, message", [("missing", "does not exist"), ("empty", "is not a model folder")])
def test_evaluate_refuses_a_model_path_before_expected_outputs(tmp_path, capsys, monkeypatch, model, message):
    monkeypatch.setenv("SELFPLAY_CACHE", str(tmp_path / "cache"))
    path = tmp_path / model
    if model == "empty":
        path.mkdir()
    assert main(["evaluate", "--benchmark", "humanevalplus", "--model", str(path), "--out",
                 str(tmp_path / "o"), "--ids", "HumanEval/0"]) == 2
    _one_line_error(capsys, "evaluate", f"--model {path}: {message}")
    assert not (tmp_path / "cache").exists() and not (tmp_path / "o").exists()
