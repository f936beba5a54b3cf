"""Views of a run store in the dashboards users already run: TensorBoard, MLflow and wandb.

metrics.csv and summary.json stay the source of truth; the live loggers (``logging.tensorboard``,
``logging.mlflow``, ``logging.wandb``, built in training/loggers.py) and ``export.export`` write
the same runs the same way, grouped by sweep and variant, so a sweep trained with no logger can be
compared in any of them later; ``serve.dashboard`` starts the real server on a sweep.

The package is imported by training (live loggers), so this file imports nothing: the export
side's pandas and the servers load only where they are used.
"""
