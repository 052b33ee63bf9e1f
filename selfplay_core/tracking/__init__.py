"""Run tracking: MLflow logging and the plots people look at (goalpost heatmap, curves)."""
