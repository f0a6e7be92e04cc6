"""What a newcomer meets: quiet output with a timed line per stage, one error style in every
command, and no silent overwrite of an earlier run."""

import os
import re
import subprocess
import sys

import pytest
from helpers import assert_a_runs_export_and_stages, script_module

from vit import cli
from vit_app import outputs
from vit_app.tasks.classify.data import readers


def _vit(*args, cwd):
    """Runs `vit ARGS` in a fresh process, as a user would; (returncode, stdout, stderr)."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("TF_CPP_MIN_LOG_LEVEL", "KERAS_BACKEND")}
    done = subprocess.run([sys.executable, "-m", "vit.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.slow  # the real command in a fresh process (about 30 s); in the default tier the
# shared in-process run holds the same stages and files (tests/test_training_run.py)
def test_vit_train_is_quiet_and_times_every_stage(tmp_path):
    # One epoch is no model for an int8 file to match: the bars are off here (the export
    # matrix test holds trained models to them). The default job's data and stages with a
    # one-block model: `.ci/run` has just run the default job itself.
    code, stdout, stderr = _vit("train", "--epochs", "1", "--output", "run",
                                "--min-agreement", "0", "--set", "model.num_layers=1",
                                "--set", "model.hidden_size=32", "--set", "model.mlp_dim=64",
                                cwd=tmp_path)
    assert code == 0, stderr
    assert stderr == ""  # no TensorFlow, absl, CUDA-probe or converter lines
    assert re.search(r"^analysis: .+ \.\.\. \d+\.\d s$", stdout, re.M)
    assert_a_runs_export_and_stages(tmp_path / "run", stdout)


def test_a_command_is_quiet_in_a_fresh_process(tmp_path):
    """TensorFlow's start-up lines stay hidden (the whole `vit train`: the slow test above)."""
    code, stdout, quiet = _vit("inspect", "--complexity", "Ti/16", "--image-size", "32",
                               cwd=tmp_path)
    assert code == 0 and stdout and quiet == ""


@pytest.mark.slow  # a second fresh process (about 5 s)
def test_verbose_shows_what_quiet_hides(tmp_path):
    code, _, verbose = _vit("inspect", "--complexity", "Ti/16", "--image-size", "32",
                            "--verbose", cwd=tmp_path)
    assert code == 0 and verbose.strip()  # TensorFlow's own start-up lines


@pytest.mark.parametrize("argv, expected", [
    (["train", "--batch-size", "0"], "batch_size"),
    (["train", "--data", "nothing:here"], "data spec 'nothing:here' not understood"),
    (["evaluate", "--model", "missing.keras", "--data", "digits"], "missing.keras"),
    (["predict", "missing.png", "--model", "missing.keras"], "missing.keras"),
    (["export", "--model", "missing.keras"], "model 'missing.keras' does not exist"),
    (["inspect", "--complexity", "B/16", "--image-size", "225"], "not divisible by patch_size"),
    (["bench", "--image-size", "100"], "not divisible by patch_size"),
    (["weights", "fetch", "imagenet21k", "--model", "Ti/16"], "no 'imagenet21k' weights"),
])
def test_every_command_reports_bad_input_in_one_line_with_status_2(argv, expected, tmp_path,
                                                                   monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    error = captured.err.strip()
    assert error.startswith(f"vit {argv[0]}: error: ") and expected in error, error
    assert "Traceback" not in error and "\n" not in error
    with pytest.raises(ValueError):
        cli.main([*argv, "--debug"])


def test_verbose_flag_is_read_before_parsing():
    assert cli.verbose_requested(["train", "--verbose"])
    assert cli.verbose_requested(["train", "--verbose", "2"])
    assert cli.verbose_requested(["export", "--model", "m.keras", "--verbose"])
    assert not cli.verbose_requested(["train", "--verbose", "0"])
    assert not cli.verbose_requested(["train", "--verbose=0"])
    assert not cli.verbose_requested(["train"])


def _finished_run(folder):
    os.makedirs(folder / "logs")
    (folder / "metrics.json").write_text("{}")
    (folder / "logs" / "events.out").write_text("old run")
    os.makedirs(folder / ".worker-1")
    (folder / "notes.txt").write_text("the user's own file")


def test_an_earlier_run_is_refused_unless_overwrite(tmp_path):
    run = tmp_path / "run"
    _finished_run(run)
    with pytest.raises(ValueError, match="already holds a finished run.*--overwrite"):
        outputs.start_mode(str(run), resume=False, overwrite=False)
    with pytest.raises(ValueError, match="finished.*nothing to continue"):
        outputs.start_mode(str(run), resume=True, overwrite=False)
    with pytest.raises(ValueError, match="give one of them"):
        outputs.start_mode(str(run), resume=True, overwrite=True)
    # A scheduler restarting `--resume auto` after the run finished: nothing to do.
    assert outputs.start_mode(str(run), resume="auto", overwrite=False) == "finished"
    assert outputs.start_mode(str(run), resume=False, overwrite=True) == "replace"
    outputs.clear_run_files(str(run))
    # The old run's files are gone (TensorBoard cannot mix); nothing else was touched.
    assert sorted(os.listdir(run)) == [".worker-1", "notes.txt"]


@pytest.mark.parametrize("leftover", ["backup/state.json", "backup", "logs", "history.csv"])
def test_an_unfinished_or_killed_run_is_refused_too(tmp_path, leftover):
    run = tmp_path / "run"
    os.makedirs(run / leftover if "." not in leftover else (run / leftover).parent)
    if "." in leftover:
        (run / leftover).write_text("{}")
    with pytest.raises(ValueError, match=r"holds an unfinished run \(" + leftover.split("/")[0]):
        outputs.start_mode(str(run), resume=False, overwrite=False)
    if leftover == "backup/state.json":
        assert outputs.start_mode(str(run), resume=True, overwrite=False) == "resume"
        assert outputs.start_mode(str(run), resume="auto", overwrite=False) == "resume"
    else:  # killed before its first backup was whole: nothing to resume, auto starts afresh
        with pytest.raises(ValueError, match="no backup to continue from.*--resume auto"):
            outputs.start_mode(str(run), resume=True, overwrite=False)
        assert outputs.start_mode(str(run), resume="auto", overwrite=False) == "replace"


def test_a_run_killed_during_its_export_is_unfinished_and_resumes(tmp_path):
    """metrics.json is written before the export, the backup removed after it: both there means
    the run was killed in between, and --resume finishes it."""
    run = tmp_path / "run"
    _finished_run(run)
    os.makedirs(run / "backup")
    (run / "backup" / "state.json").write_text("{}")
    with pytest.raises(ValueError, match=r"holds an unfinished run .*--resume continues it"):
        outputs.start_mode(str(run), resume=False, overwrite=False)
    assert outputs.start_mode(str(run), resume=True, overwrite=False) == "resume"


def test_a_folder_without_a_run_is_fine(tmp_path):
    (tmp_path / "data.csv").write_text("a user's file")
    assert outputs.start_mode(str(tmp_path), resume=False, overwrite=False) == "fresh"
    assert outputs.start_mode(str(tmp_path / "new"), resume=False, overwrite=False) == "fresh"
    assert outputs.start_mode(str(tmp_path / "new"), resume="auto", overwrite=False) == "fresh"
    with pytest.raises(ValueError, match="no backup to continue from"):
        outputs.start_mode(str(tmp_path / "new"), resume=True, overwrite=False)


def test_vit_train_refuses_before_reading_any_data(tmp_path, monkeypatch, capsys):
    _finished_run(tmp_path / "run")

    def no_data(*args, **kwargs):
        raise AssertionError("data was read before the output folder was checked")

    monkeypatch.setattr(readers, "open_training_data", no_data)
    assert cli.main(["train", "--output", str(tmp_path / "run"), "--epochs", "1"]) == 2
    assert "already holds a finished run" in capsys.readouterr().err


def test_readme_parameter_count_is_the_default_models():
    """docs/training.md's parameter count and `vit train` example come from
    tools/readme_example.py, not typed by hand."""
    readme_example = script_module("tools", "readme_example")
    with open(readme_example.DEFAULT_TARGET, encoding="utf-8") as file:
        readme = file.read()
    stated = int(readme_example.PARAMS.search(readme).group(1).replace(",", ""))
    assert stated == readme_example.default_parameter_count()
    assert readme_example.START in readme and readme_example.END in readme
    assert "Output of `python tools/readme_example.py` on: " in readme


def test_readme_example_keeps_the_first_and_last_epochs():
    readme_example = script_module("tools", "readme_example")
    output = "header\n" + "".join(f"epoch {i}/9\n" for i in range(1, 10)) + "table\n"
    assert readme_example.shorten(output).splitlines() == [
        "header", "epoch 1/9", "epoch 2/9", "...", "epoch 8/9", "epoch 9/9", "table"]


def test_a_preset_reports_every_bad_value_at_once():
    from training.presets import get_preset

    with pytest.raises(ValueError) as caught:
        get_preset("digits_tiny").replace(schedule={"epochs": 0},
                                          optim={"lr": float("nan")},
                                          objective={"label_smoothing": 1.0},
                                          augment={"erasing_prob": 1.5})
    message = str(caught.value)
    for expected in ("schedule.epochs must be >= 1, got 0",
                     "optim.lr must be a finite number >= 0, got nan",
                     "objective.label_smoothing must be in [0, 1), got 1.0",
                     "augment.erasing_prob must be in [0, 1], got 1.5"):
        assert expected in message
    erasing = get_preset("digits_tiny").replace(augment={"erasing_prob": 1.0})
    assert erasing.augment.erasing_prob == 1.0
