"""The GPU benchmarks' scripts work before GPU time is spent on them: what the training step
keeps for its backward pass (benchmarks/saved_residuals.py), and every Keras row of
benchmarks/backends_gpu.py on a CPU at a tiny size."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _script(name, args, tmp_path, timeout):
    done = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", name), *args],
                          capture_output=True, text=True, timeout=timeout, cwd=tmp_path,
                          env=dict(os.environ, KERAS_BACKEND="jax"))
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.slow  # a JAX process tracing B/16-sized steps (about 20 s): the slow tier, in CI
def test_saved_residuals_show_what_the_dots_policy_keeps(tmp_path):
    """On JAX (a dependency, so always here), the checkpoint policy keeps the matrix products
    and drops the float32 attention probabilities; full remat keeps less still; the lean
    GELU and LayerNorm keep no float32 token tensor."""
    output = tmp_path / "residuals.json"
    printed = _script("saved_residuals.py", ["--model", "Ti/16", "--image-size", "32",
                                             "--batch", "2", "--json", str(output)],
                      tmp_path, timeout=300)
    rows = {row["name"]: row for row in json.loads(output.read_text())["rows"]}
    assert set(rows) == {"plain", "fused_qkv", "attention_kernel", "lean_activations",
                         "remat_dots", "remat_full"}
    plain, dots, full = rows["plain"], rows["remat_dots"], rows["remat_full"]
    assert full["activation_bytes"] < dots["activation_bytes"] < plain["activation_bytes"]
    lean = rows["lean_activations"]
    assert lean["activation_bytes"] < plain["activation_bytes"]
    tokens = "f32[2,5,192]"  # a float32 LayerNorm tensor of Ti/16's width
    assert tokens in plain["shapes"] and tokens not in lean["shapes"]
    probabilities = "f32[2,3,5,5]"  # batch 2, 3 heads, 5 tokens (4 patches and the class)
    assert probabilities in plain["shapes"] and probabilities not in dots["shapes"]
    assert "| remat_dots |" in printed


@pytest.mark.slow
def test_gpu_benchmark_rows_run_on_a_cpu(tmp_path):
    """One row of each kind (the forms, float8 training, int8 inference, the bare step, an XLA
    flag, keras-hub, timm) at a tiny size, one encoder block deep; timm is reported as skipped
    where it is not installed."""
    # ours_kernel_and_lean, a subset of ours_all_forms' forms, is not a kind of its own
    rows = ["ours_all_forms", "ours_float8", "ours_int8", "ours_bare_step",
            "ours_xla_dot_merger_64mb", "keras_hub", "timm"]
    output = tmp_path / "gpu.json"
    printed = _script("backends_gpu.py", ["--model", "Ti/16", "--image-size", "32",
                                          "--batch", "4", "--steps", "2", "--peak-size", "256",
                                          "--depth", "1",
                                          "--rows", ",".join(rows), "--json", str(output),
                                          "--dump-hlo", str(tmp_path / "hlo")],
                      tmp_path, timeout=900)
    results = json.loads(output.read_text())["results"]
    assert results["peak"]["peak_tflops"] > 0
    assert results["peak"]["versions"]["jax"] and results["peak"]["versions"]["keras"]
    for name in ("ours_all_forms", "ours_float8", "ours_bare_step", "ours_xla_dot_merger_64mb"):
        assert results[name]["train_img_s"] > 0, results[name]
    for name in ("ours_all_forms", "ours_int8", "ours_xla_dot_merger_64mb"):
        assert results[name]["infer_img_s"] > 0, results[name]
    assert "train_img_s" not in results["ours_int8"]  # int8 is an inference quantization
    for name in ("keras_hub", "timm"):
        assert "failed" not in results[name], results[name]
    assert "ViT-Ti/16 at depth 1 32px" in printed, printed[:300]
    for name in rows:
        assert f"| {name} |" in printed
    dumped = sorted(os.listdir(tmp_path / "hlo" / "ours_all_forms"))
    assert [name.split(".")[1] for name in dumped] == ["jit_train_step", "jit_forward"], dumped
