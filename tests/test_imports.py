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
