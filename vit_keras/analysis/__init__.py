"""Looking inside a ViT (paper section 4.5) and what it costs.

- `looking_inside`: attention maps and rollout, mean attention distance, position-embedding
  similarity, patch-embedding filters and few-shot linear evaluation (re-exported here).
- `plots`: matplotlib figures of those (imported on use).
- `complexity`: parameters, FLOPs and activation memory of a config.
"""

from vit_keras.analysis.looking_inside import (HEAD_FUSIONS, AttentionProbe, attention_maps,
                                               attention_rollout, embedding_filters,
                                               feature_extractor, few_shot,
                                               few_shot_from_features, mean_attention_distance,
                                               mean_attention_distance_from_attention, overlay,
                                               patch_centre_distances, patch_filter_kernel,
                                               patch_token_slice,
                                               position_embedding_similarity,
                                               principal_filters, rollout_from_attention,
                                               rollout_matrix, upsample_map)

__all__ = ["HEAD_FUSIONS", "AttentionProbe", "attention_maps", "attention_rollout",
           "embedding_filters", "feature_extractor", "few_shot", "few_shot_from_features",
           "mean_attention_distance", "mean_attention_distance_from_attention", "overlay",
           "patch_centre_distances", "patch_filter_kernel", "patch_token_slice", "position_embedding_similarity",
           "principal_filters", "rollout_from_attention", "rollout_matrix", "upsample_map"]
