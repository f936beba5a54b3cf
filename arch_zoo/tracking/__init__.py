"""The writers behind every dashboard: one run's metrics, summary and identity written to
TensorBoard, MLflow or wandb the same way, whether live during training (``training/loggers.py``)
or after the fact (``dashboards/export.py``).

Below training and dashboards alike; imports only the run directory's schema, so training pulls no
reports and the export side no Lightning. This file imports nothing: each backend's package loads
only where it is used."""
