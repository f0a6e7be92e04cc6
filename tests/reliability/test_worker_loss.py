"""Worker loss under MultiWorkerMirroredStrategy: kill one of two local workers mid-run, then
the documented recovery (restart every worker with --resume) continues from the last backup
and completes the run. Slow: four TensorFlow processes."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from localhost import free_ports

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EPOCHS = 3
ARGS = ["train", "--strategy", "multi_worker", "--epochs", str(EPOCHS), "--batch-size", "32",
        "--no-export", "--no-inspect", "--seed", "2",
        "--set", "model.image_size=8", "--set", "model.patch_size=4", "--set", "model.hidden_size=16",
        "--set", "model.mlp_dim=32", "--set", "model.num_heads=2", "--set", "model.num_layers=1",
        "--set", "eval_every=3", "--set", "backup_every=5"]


def _start_workers(output, resume):
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    processes = []
    for index in range(2):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=REPO,
                   CUDA_VISIBLE_DEVICES="",
                   TF_CONFIG=json.dumps({"cluster": cluster,
                                         "task": {"type": "worker", "index": index}}))
        command = [sys.executable, "-m", "vit.cli", *ARGS, "--output", str(output)]
        processes.append(subprocess.Popen(command + (["--resume"] if resume else []), env=env,
                                          cwd=REPO, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
    return processes


@pytest.mark.slow
def test_killed_worker_then_restart_resumes_from_backup(tmp_path):
    state_file = tmp_path / "backup" / "state.json"
    chief, worker = _start_workers(tmp_path, resume=False)
    deadline = time.time() + 180
    while time.time() < deadline and chief.poll() is None and not (
            state_file.exists() and json.loads(state_file.read_text())["global_step"] >= 10):
        time.sleep(0.02)
    assert chief.poll() is None, "the run ended before the worker could be killed"
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    try:  # the survivor fails (or blocks in a collective): it is stopped like a preempted VM
        chief.wait(timeout=30)
        survivor = f"exited {chief.returncode}"
    except subprocess.TimeoutExpired:
        chief.send_signal(signal.SIGKILL)
        chief.wait()
        survivor = "blocked, killed after 30 s"
    state = json.loads(state_file.read_text())
    assert 0 < state["global_step"] and not (tmp_path / "model.keras").exists()

    processes = _start_workers(tmp_path, resume=True)
    logs = [process.communicate(timeout=300)[0] for process in processes]
    assert [process.returncode for process in processes] == [0, 0], logs[0][-2000:] + \
        logs[1][-2000:]
    assert f"continuing at epoch {state['epoch'] + 1}, step {state['step']}" in logs[0]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["epochs"] == EPOCHS and metrics["replicas"] == 2
    assert not (tmp_path / "backup").exists()
    print(f"\nworker loss: killed worker 1 after global step {state['global_step']}; chief "
          f"{survivor}; restart with --resume completed {EPOCHS} epochs")
