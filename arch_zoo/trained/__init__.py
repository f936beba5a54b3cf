"""Trained runs read back: ``restore`` rebuilds a run's model from its directory (or a sweep's best
run, ``best``). Beside config and data, below training: it needs the run directory's files, the
config and the models, never Lightning, so ``arch_zoo.restore`` loads no part of training."""
