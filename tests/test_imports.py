from tests.conftest import run_with_torch_only


def test_models_import_with_torch_alone():
    """arch_zoo.models must not pull Lightning, wandb, pandas or OmegaConf."""
    proc = run_with_torch_only("""
import torch
from arch_zoo.models import build_model
m = build_model({'kind': 'encoder_decoder', 'd_model': 16, 'n_heads': 2, 'n_layers': 1, 'position': 'rope'}, 11)
print(m(torch.ones(1, 3, dtype=torch.long), torch.ones(1, 2, dtype=torch.long)).logits.shape)
""")
    assert proc.returncode == 0, proc.stderr
    assert "torch.Size([1, 2, 11])" in proc.stdout


def test_sweeps_preload_the_report_libraries_on_a_background_thread():
    """While workers train, `arch-zoo sweep` imports pandas & co. for its final table off the main thread."""
    import subprocess
    import sys

    code = """
import sys, threading
from arch_zoo.sweeps.cli_support import preload_reports
assert "pandas" not in sys.modules
preload_reports()
loaders = [t for t in threading.enumerate() if t.name == "arch-zoo-preload-reports"]
assert len(loaders) == 1 and loaders[0].daemon
loaders[0].join(120)
print("arch_zoo.reports" in sys.modules, "pandas" in sys.modules)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True"]
