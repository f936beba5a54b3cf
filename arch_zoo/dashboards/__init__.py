"""Views of a run store in the dashboards users already run: TensorBoard, MLflow and wandb.

metrics.csv and summary.json stay the source of truth. ``export.export`` writes a store's runs
after the fact through the same writers the live loggers use (``arch_zoo.tracking``), grouped by
sweep and variant, so a sweep trained with no logger can be compared in any of them later;
``serve.dashboard`` starts the real server on a sweep. Above reports (it reads run stores with
them); nothing below imports it.
"""
