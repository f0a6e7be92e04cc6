"""SIGTERM or Ctrl+C at a random step of a real `vit train`: the backup of that step is on disk
within seconds, the run exits with status 75 (130 for Ctrl+C) and prints the command that
resumes, and `--resume` ends with the weights of an uninterrupted run. On one TensorFlow device
(fast), MirroredStrategy over two logical CPUs, JAX over four simulated devices, two JAX
processes over loopback and two TensorFlow workers where only one process is signalled (slow).
Also: the last step of an epoch, a second Ctrl+C, a signal outside training, `--resume auto`.
"""

import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import time

import calibration
import numpy as np
import pytest
from localhost import free_ports
from runs import jax_env, read_state, start_vit, vit_env, wait_for_backup

from training import preemption

# Two epochs: each test's seeded signal comes at step 12-54 of 88, 34 steps or more before the
# end (a third epoch only made every run a third longer).
EPOCHS, BATCH = 2, 32
STEPS = 1437 // BATCH  # digits' training split
TINY = ["--epochs", str(EPOCHS), "--batch-size", str(BATCH), "--seed", "4", "--no-export",
        "--no-inspect", "--set", "model.image_size=8", "--set", "model.patch_size=4",
        "--set", "model.hidden_size=16", "--set", "model.mlp_dim=32",
        "--set", "model.num_heads=2", "--set", "model.num_layers=1",
        "--set", "loop.eval_every=1", "--set", "loop.backup_every=5"]
JAX = ["--backend", "jax", "--mixed-precision", "float32"]
# On the reference machine, each run with a core of its own: the backup within seconds, the exit
# (process teardown included) within a typical grace period.
SIGNAL_TO_BACKUP_LIMIT_S = 10
SIGNAL_TO_EXIT_LIMIT_S = 30


def _limits(runs: int) -> tuple[float, float]:
    """(signal-to-backup, signal-to-exit) limits in seconds for `runs` training processes this
    test keeps running at once: the reference bounds times how much slower this machine is
    (`calibration`) and how many runs share each core (this test's and the other pytest
    workers' tests)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    sharing = max(1.0, (runs + workers - 1) / len(os.sched_getaffinity(0)))
    scale = max(1.0, calibration.main_job_seconds()[0] / calibration.REFERENCE_MAIN_JOB) * sharing
    return SIGNAL_TO_BACKUP_LIMIT_S * scale, SIGNAL_TO_EXIT_LIMIT_S * scale


def _start(args, output, env=None, two_cpus=False):
    return start_vit(["train", *args, "--output", output], output.parent, env, two_cpus,
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(process, timeout=600):
    log = process.communicate(timeout=timeout)[0]
    assert process.returncode == 0, log[-4000:]
    return log


def _signal_at_random_step(processes, output, rng, signum=signal.SIGTERM, targets=None,
                           beside=1):
    """Sends `signum` to `targets` (default: every process) at a random step of the two epochs
    (10 steps before the end at the latest), while `beside` other runs (the references) train.
    Asserts that the backup the runs ended with was on disk, and that they all exited, within
    `_limits`; returns (those two times in seconds, their logs)."""
    wait_for_backup(processes[0], output, rng.randint(5, 2 * STEPS - 10), timeout=300)
    time.sleep(rng.uniform(0.0, 0.05))
    assert all(process.poll() is None for process in processes), "the run ended first"
    before = read_state(output)
    sent = time.monotonic()
    for process in targets or processes:
        process.send_signal(signum)
    seen = [(0.0, before["global_step"])]
    while any(process.poll() is None for process in processes):
        state = read_state(output)
        if state is not None and state["global_step"] != seen[-1][1]:
            seen.append((time.monotonic() - sent, state["global_step"]))
        time.sleep(0.01)
    exited = time.monotonic() - sent
    logs = [process.communicate(timeout=60)[0] for process in processes]
    final = read_state(output)["global_step"]
    backup_seconds = min(seconds for seconds, step in seen if step == final) \
        if any(step == final for _, step in seen) else exited
    backup_limit, exit_limit = _limits(len(processes) + beside)
    assert backup_seconds < backup_limit and exited < exit_limit, \
        (backup_seconds, exited, backup_limit, exit_limit)
    return backup_seconds, exited, logs


def _stopped_at(log) -> int:
    """The global step a stopped run says its backup holds."""
    found = re.search(r"stopped .* at .*\(global step (\d+)\); backup written to (\S+)", log)
    assert found, log[-3000:]
    return int(found.group(1))


def _stopped_together(processes, output, rng, what, beside=0):
    """Signals the second of two processes at a random step (`beside` other runs training);
    asserts that both stop at the same step, in time, with the backup of that step; returns that
    step and their logs."""
    seconds, exited, logs = _signal_at_random_step(processes, output, rng,
                                                   targets=processes[1:], beside=beside)
    assert [process.returncode for process in processes] == [preemption.EXIT_PREEMPTED] * 2, \
        logs[0][-2000:] + logs[1][-2000:]
    steps = [_stopped_at(log) for log in logs]
    assert steps[0] == steps[1] == read_state(output)["global_step"], steps
    print(f"\n{what}, SIGTERM to the second: both stopped at global step {steps[0]}, backup "
          f"on disk {seconds:.2f} s and both ended {exited:.2f} s after the signal")
    return steps[0], logs


def _weights(output):
    import keras

    import vit_keras  # noqa: F401  (registers the layers)

    path = os.path.join(output, "model.keras")
    return keras.saving.load_model(path, safe_mode=True, compile=False).get_weights()


def _assert_same_weights(output, reference):
    for got, want in zip(_weights(output), _weights(reference)):
        np.testing.assert_allclose(got, want, atol=1e-5)


def _stop_and_resume(tmp_path, args, seed, env=None, two_cpus=False, signum=signal.SIGTERM):
    """An uninterrupted reference run, and a run signalled at a random step then resumed:
    both end with the same weights."""
    reference = _start(args, tmp_path / "ref", env, two_cpus)
    output = tmp_path / "victim"
    victim = _start(args, output, env, two_cpus)
    seconds, exited, (log,) = _signal_at_random_step([victim], output, random.Random(seed),
                                                     signum)
    expected = preemption.EXIT_ABORTED if signum == signal.SIGINT else preemption.EXIT_PREEMPTED
    assert victim.returncode == expected, log[-3000:]
    step = _stopped_at(log)
    assert read_state(output)["global_step"] == step
    assert "resume with: vit train " in log and log.rstrip().endswith("--resume")
    resumed = _finish(_start([*args, "--resume"], output, env, two_cpus))
    assert f"(global step {step})" in resumed
    _finish(reference)
    _assert_same_weights(output, tmp_path / "ref")
    assert not (output / "backup").exists()
    print(f"\n{signal.Signals(signum).name}: stopped at global step {step}, backup on disk "
          f"{seconds:.2f} s and the process ended {exited:.2f} s after the signal; --resume "
          "equals the uninterrupted run")


@pytest.mark.slow
def test_sigterm_on_one_tensorflow_device_then_resume(tmp_path):
    _stop_and_resume(tmp_path, TINY, seed=0)


@pytest.mark.slow
def test_ctrl_c_under_mirrored_strategy_over_two_cpus(tmp_path):
    _stop_and_resume(tmp_path, [*TINY, "--strategy", "mirrored"], seed=1, two_cpus=True,
                     signum=signal.SIGINT)


@pytest.mark.slow
def test_sigterm_on_four_jax_devices_then_resume(tmp_path):
    _stop_and_resume(tmp_path, [*TINY, *JAX], seed=2, env=jax_env(4))


def _two_processes(args, output):
    (port,) = free_ports(1)
    return [_start([*args, "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2",
                    "--process-id", str(index)], output, jax_env(1)) for index in range(2)]


@pytest.mark.slow
def test_two_jax_processes_stop_at_the_same_step_when_one_is_signalled(tmp_path):
    args = [*TINY, *JAX]
    # The uninterrupted reference: one process on two devices, the same data parallel step as
    # two processes of one device each (tests/test_training_jax.py), while they run.
    reference = _start(args, tmp_path / "ref", jax_env(2))
    output = tmp_path / "victim"
    processes = _two_processes(args, output)
    # Only process 1 hears the signal; process 0 (the chief) must stop at the same step.
    step, logs = _stopped_together(processes, output, random.Random(3), "two JAX processes",
                                   beside=1)
    assert "stopped with the other processes (one of them received a signal)" in logs[0]
    assert f"backup written to {output / 'backup'}" in logs[1]
    assert not [name for name in os.listdir(output) if name.startswith(".")]
    resumed = [_finish(process) for process in _two_processes([*args, "--resume"], output)]
    assert f"(global step {step})" in resumed[0]
    # Two processes over loopback train as one process on two devices does, and only the chief
    # writes the run folder.
    assert "DataParallel over 2 processes on 2 cpu devices x2" in resumed[0]
    assert "top-1 (val/test)" in resumed[0] and "top-1 (val/test)" not in resumed[1]
    assert not [name for name in os.listdir(output) if name.startswith(".")]
    assert not (output / "backup").exists()
    _finish(reference)
    _assert_same_weights(output, tmp_path / "ref")


# --- the signal watch alone ------------------------------------------------------------------

WATCH_SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
    from training.preemption import SignalWatch
    with SignalWatch() as watch, watch.deferred():
        for _ in range(int(sys.argv[1])):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)
        print("received", watch.received, flush=True)
        time.sleep(0.5)
""")


def test_first_ctrl_c_is_a_request(tmp_path):
    """While training, Ctrl+C only sets `received` (the step ends, then a backup); leaving the
    block with it set ends the run with Preempted."""
    said = tmp_path / "said.txt"
    with open(said, "wb") as printed:
        with preemption.SignalWatch(print_fd=printed.fileno()) as watch:
            with pytest.raises(preemption.Preempted, match="stopped on SIGINT during"):
                with watch.deferred():
                    os.kill(os.getpid(), signal.SIGINT)
                    time.sleep(0.5)
                    assert watch.received == "SIGINT"
    assert said.read_text() == ("vit train: SIGINT received: finishing this step, then saving "
                                "a backup; Ctrl+C again aborts at once\n")


@pytest.mark.slow
def test_a_second_ctrl_c_aborts_at_once(tmp_path):
    twice = subprocess.run([sys.executable, "-c", WATCH_SCRIPT, "2"], env=vit_env(),
                           cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert twice.returncode == preemption.EXIT_ABORTED, twice.stderr
    assert "second Ctrl+C: aborting now" in twice.stderr and "received" not in twice.stdout


def test_a_signal_outside_training_stops_at_once_and_handlers_come_back():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(preemption.Preempted, match="stopped on SIGTERM during start-up"):
        with preemption.SignalWatch(print_fd=os.open(os.devnull, os.O_WRONLY)):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises before this ends
            pytest.fail("the signal did not stop the run")
    assert signal.getsignal(signal.SIGTERM) is before


def test_several_processes_stop_together_at_agreed_points(tmp_path):
    """With several processes a signal never stops one of them alone: it is held until a
    checkpoint, where all agree (here `any_process` stands in for the collective)."""
    with open(tmp_path / "said.txt", "wb") as printed:
        with preemption.SignalWatch(print_fd=printed.fileno()) as watch:
            watch.hold = True
            watch.checkpoint(lambda flag: flag)  # no signal anywhere: go on
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(preemption.STUCK_SECONDS + 0.5)  # held: neither raised nor exited
            assert watch.received == "SIGTERM" and not watch.stopped
            with pytest.raises(preemption.Preempted, match="stopped on SIGTERM during start-up"):
                watch.checkpoint(lambda flag: flag)
    assert "stopping with the other processes" in (tmp_path / "said.txt").read_text()
    other = preemption.SignalWatch()
    with pytest.raises(preemption.Preempted, match="with the other processes .*during training"):
        other.phase = "training"
        other.checkpoint(lambda flag: True)  # another process was signalled


def test_resume_command_keeps_the_arguments_and_drops_overwrite():
    assert preemption.resume_command(["train", "--output", "my run", "--overwrite"]) == \
        "vit train --output 'my run' --resume"
    assert preemption.resume_command(["train", "--overw", "--out", "o"]) == \
        "vit train --out o --resume"
    assert preemption.resume_command(["train", "--resume", "auto"]) == "vit train --resume auto"
    assert preemption.resume_command(["train", "--resume=auto"]) == "vit train --resume=auto"


def test_a_stop_before_training_prints_the_same_command(tmp_path, capsys, monkeypatch):
    """SIGTERM during start-up (here: while the devices are placed, before anything global is
    set): nothing was trained, exit 75, and the advice is the command itself."""
    from vit import cli
    from training import distribute

    def preempted_place(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)

    monkeypatch.setattr(distribute, "place", preempted_place)
    args = ["train", *TINY, "--output", str(tmp_path / "run")]
    assert cli.main(args) == preemption.EXIT_PREEMPTED
    out = capsys.readouterr().out
    assert "stopped on SIGTERM during start-up" in out and "nothing was trained yet" in out


def test_a_stop_on_the_last_batch_of_an_epoch_waits_for_the_epoch_end(tmp_path):
    """The last step of an epoch is not a stop point (a backup there would resume an epoch of 0
    steps): the stop comes at the epoch's end, after its backup and validation."""
    from training import callbacks

    backup = callbacks.ResumableBackup(str(tmp_path), steps_per_epoch=4, write=False)
    watch = preemption.SignalWatch()
    stop = preemption.StopOnSignal(watch, backup, lambda flag: flag, str(tmp_path))
    backup.on_epoch_begin(1)
    stop.on_train_batch_end(1)  # no signal yet
    watch.received = "SIGTERM"
    stop.on_train_batch_end(3)  # the epoch's last step: go on to its end
    with pytest.raises(preemption.Preempted, match=r"at the end of epoch 2 \(global step 8\)"):
        stop.on_epoch_end(1)
    backup.on_epoch_begin(2)
    watch.stopped = False
    with pytest.raises(preemption.Preempted, match=r"at epoch 3, step 2/4 \(global step 10\)"):
        stop.on_train_batch_end(1)


def test_resume_auto_does_nothing_to_a_finished_run(tmp_path, capsys):
    from vit import cli

    (tmp_path / "metrics.json").write_text("{}")
    assert cli.main(["train", "--resume", "auto", "--output", str(tmp_path)]) == 0
    assert "holds a finished run (metrics.json); nothing to do" in capsys.readouterr().out
    assert cli.main(["train", "--resume", "--output", str(tmp_path / "new")]) == 2
    assert "holds no backup to continue from" in capsys.readouterr().err


def _two_tensorflow_workers(args, output):
    import json

    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    return [_start([*args, "--strategy", "multi_worker"], output, vit_env(TF_CONFIG=json.dumps(
        {"cluster": cluster, "task": {"type": "worker", "index": index}})))
        for index in range(2)]


@pytest.mark.slow
def test_two_tensorflow_workers_stop_at_the_same_step_when_one_is_signalled(tmp_path):
    output = tmp_path / "run"
    workers = _two_tensorflow_workers(TINY, output)
    step, _ = _stopped_together(workers, output, random.Random(5), "two TensorFlow workers")
    resumed = [_finish(worker) for worker in _two_tensorflow_workers([*TINY, "--resume"], output)]
    assert f"(global step {step})" in resumed[0]
    assert (output / "metrics.json").exists() and not (output / "backup").exists()


def test_processes_that_disagree_on_resuming_all_refuse(tmp_path):
    """Each process reads the output folder on its own: when one finds a backup and another
    does not (an output folder that is not shared), every process refuses, none hangs."""
    from training.setup import check_same_start

    class TwoProcesses:
        processes = 2
        any_process = staticmethod(lambda flag: True)  # the other process resumes

    with pytest.raises(ValueError, match="every process must see the same output folder"):
        check_same_start(TwoProcesses, "fresh", str(tmp_path))  # and this one does not
    TwoProcesses.any_process = staticmethod(lambda flag: flag)  # both resume
    check_same_start(TwoProcesses, "resume", str(tmp_path))
