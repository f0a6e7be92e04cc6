"""`vit_app.hardware`: the dtype policy picked for the hardware found."""

from training import presets, setup
from vit_app import hardware


def test_cpu_bfloat16_flags_are_read_from_cpuinfo(tmp_path):
    amx = tmp_path / "amx"
    amx.write_text("processor : 0\nflags : fpu sse avx512f amx_bf16 amx_tile\n")
    plain = tmp_path / "plain"
    plain.write_text("processor : 0\nflags : fpu sse avx2 avx512f\n")
    assert hardware.cpu_has_bfloat16(str(amx))
    assert not hardware.cpu_has_bfloat16(str(plain))
    assert not hardware.cpu_has_bfloat16(str(tmp_path / "missing"))


def test_gpu_policy_follows_compute_capability():
    assert hardware.gpu_policy((8, 6)) == "mixed_bfloat16"
    assert hardware.gpu_policy((7, 5)) == "mixed_float16"
    assert hardware.gpu_policy((6, 1)) == "float32"
    assert hardware.gpu_policy(None) == "float32"


def test_auto_precision_uses_the_fastest_policy(monkeypatch):
    preset = presets.get_preset("imagenet_s16")
    assert preset.loop.mixed_precision == "auto"
    monkeypatch.setattr(hardware, "cpu_has_bfloat16", lambda: False)
    assert setup.resolve_precision(preset, on_tpu=False) == "float32"
    monkeypatch.setattr(hardware, "cpu_has_bfloat16", lambda: True)
    assert setup.resolve_precision(preset, on_tpu=False) == "mixed_bfloat16"
    assert setup.resolve_precision(preset, on_tpu=True) == "mixed_bfloat16"
