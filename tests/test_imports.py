import subprocess
import sys


def test_models_import_with_torch_alone():
    """arch_zoo.models must not pull Lightning, wandb, pandas or OmegaConf."""
    code = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {'pytorch_lightning', 'lightning', 'wandb', 'pandas', 'omegaconf'}:
            raise ImportError('blocked ' + name)
sys.meta_path.insert(0, Block())
import torch
from arch_zoo.models import build_model
m = build_model({'kind': 'encoder_decoder', 'd_model': 16, 'n_heads': 2, 'n_layers': 1, 'position': 'rope'}, 11)
print(m(torch.ones(1, 3, dtype=torch.long), torch.ones(1, 2, dtype=torch.long)).logits.shape)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "torch.Size([1, 2, 11])" in proc.stdout
