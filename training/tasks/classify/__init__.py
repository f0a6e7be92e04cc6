"""Classification's training part: its objectives (`objective`: one class per image, masked
patch prediction, distillation, several labels per image) and multi-label losses and metrics."""
