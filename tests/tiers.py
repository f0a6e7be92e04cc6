"""Which cases of a parametrized test the default tier runs.

A family of cases that each build, train or export a model holds one contract many times over:
the README's `pytest` runs its first `SAMPLED[family]` cases, and the slow tier (`pytest -m
slow`) runs the rest, so every case still runs in CI. A family is named by its test's node id
without the parameters; its cases keep their collection order.
"""

import pytest

# family -> cases kept in the default tier (the per-test tables in docs/testing.md say why:
# each case costs seconds and repeats its first's contract on another variant)
SAMPLED = {
    "tests/test_memory_savers.py::test_trains_with_patch_dropout": 1,
    "tests/test_memory_savers.py::test_remat_gives_the_same_loss_and_gradients": 1,
    "tests/test_finetune.py::test_layer_decay_scales_each_update_by_its_multiplier": 1,
    "tests/test_model.py::test_parameter_count_matches_closed_form": 2,
    "tests/test_complexity.py::test_params_equal_count_params_for_every_variant": 1,
    "tests/test_quantization_lora.py::test_quantize_converts_every_projection_quietly_and_saves": 1,
    "tests/test_structure.py::test_keras_files_load_after_import_vit_keras_alone": 1,
    "tests/test_hybrid.py::test_parameter_counts_and_shapes": 1,
    "tests/test_keep_best.py::test_the_run_keeps_the_best_validated_epoch_unless_told_the_last": 1,
    "tests/test_options.py::test_round_trips": 2,
    "tests/test_transforms.py::test_a_family_prepares_a_photo_as_timm_does_in_a_graph": 3,
    "tests/test_checkpoints.py::test_every_official_layout_gives_the_same_logits": 3,
    "tests/test_keras_hub_presets.py::"
    "test_a_keras_hub_vit_classifier_preset_loads_and_goes_back_with_the_same_outputs": 1,
    "tests/test_export_tflite.py::test_each_precision_loads_in_litert_with_builtin_ops": 2,
    "tests/test_weight_decay.py::test_decay_skips_tokens_posembs_probe_biases_and_norms": 3,
    "tests/test_families.py::test_outputs_equal_timm": 3,
    "tests/test_segmentation.py::test_logits_at_the_input_resolution": 2,
    "tests/test_segmentation.py::test_any_size_model_returns_each_inputs_size": 1,
    "tests/test_segmentation.py::test_config_round_trips_through_a_keras_file": 1,
    "tests/test_locality.py::test_quantize_and_lora_reach_the_stems_projection": 1,
    "tests/test_families.py::test_features_equal_forward_intermediates": 2,
    "tests/test_training_recipe.py::test_gradient_accumulation_equals_the_large_batch": 1,
    "tests/test_fast_paths.py::test_fused_adam_update_equals_keras": 1,
    "tests/test_clip_model.py::test_identical_frames_give_the_inflated_image_models_logits": 3,
    "tests/test_clip_model.py::test_a_keras_file_rebuilds_the_model_under_safe_mode": 1,
    "tests/test_clip_model.py::test_locality_attention_inflates_exactly_where_each_frame_attends_"
    "alone": 1,
}


def mark_sampled(items) -> None:
    """Marks `slow` and `sampled` every case of a `SAMPLED` family past its count (before `-m`
    selects): the other backends' passes (tests/test_backends.py) leave the `sampled` ones out,
    since a backend breaks an op, never one variant of a contract its first cases hold."""
    seen: dict[str, int] = {}
    for item in items:
        family = item.nodeid.split("[", 1)[0]
        if family not in SAMPLED or "[" not in item.nodeid:
            continue
        seen[family] = seen.get(family, 0) + 1
        if seen[family] > SAMPLED[family]:
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.sampled)
