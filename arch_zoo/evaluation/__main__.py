"""``python -m arch_zoo.evaluation --model arch_zoo --model_args run=RUN_DIR --tasks ...``: lm_eval's
command line, with arch_zoo's model class registered (lm_eval 0.4.13 and earlier do not discover
the `lm_eval.models` entry point arch_zoo declares)."""
from lm_eval.__main__ import cli_evaluate

from . import lm  # noqa: F401 - registers the 'arch_zoo' model

if __name__ == "__main__":
    cli_evaluate()
