"""Import, then fine-tune (``train.init_from``): a run started from an imported Hugging Face
checkpoint scores its first batch as Hugging Face's model does, trains on, and its export loads
with transformers."""
import pytest
import pytorch_lightning as pl
import torch

from arch_zoo import restore
from arch_zoo.cli import main
from arch_zoo.experiment import load
from arch_zoo.training import run_one
from tests.evaluation.helpers import TEXT, tiny_llama

tf = pytest.importorskip("transformers")


class FirstStep(pl.Callback):
    """The batch of the first optimizer step, the model's logits on it and the training loss it gave
    (before the update)."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == 0 and not hasattr(self, "logits"):
            with torch.no_grad():
                self.logits = pl_module.model(batch["input_ids"], batch["attention_mask"]).logits.clone()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == 1 and not hasattr(self, "loss"):
            self.loss, self.batch = float(outputs["loss"]), {k: v.clone() for k, v in batch.items()}


def test_fine_tuning_an_imported_model_starts_from_hugging_faces_loss_and_exports(tmp_path):
    hf_dir = tiny_llama(tmp_path / "hf")
    assert main(["import", str(hf_dir), "--out", str(tmp_path / "run")]) == 0
    (tmp_path / "corpus.txt").write_text("\n".join(TEXT * 4))
    cfg = load(tmp_path / "run" / "config.yaml", [
        "task.name=char_lm", f"task.files=[{tmp_path / 'corpus.txt'}]", "task.seq_len=32",
        "task.tokenizer.name=pretrained", f"task.tokenizer.path={hf_dir}", f"train.init_from={tmp_path / 'run'}",
        "train.max_steps=2", "train.val_every=2", "train.val_batches=1", "train.batch_size=2", "train.lr=1e-2",
        "train.progress_bar=false"])
    first = FirstStep()
    result = run_one(cfg, tmp_path / "tuned", callbacks=[first], quiet=True)
    assert result.status == "completed" and result.summary["step"] == 2
    hf = tf.AutoModelForCausalLM.from_pretrained(hf_dir).eval()
    b = first.batch
    assert "document_ids" not in b
    with torch.no_grad():
        theirs = hf(input_ids=b["input_ids"], attention_mask=b["attention_mask"], labels=b["labels"])
    assert first.loss == pytest.approx(float(theirs.loss), abs=1e-4)
    scale = float(theirs.logits.abs().max())  # (a random tiny model's loss is near log(vocab) from any start)
    torch.testing.assert_close(first.logits, theirs.logits, atol=1e-5 * scale, rtol=1e-5)

    assert main(["export", str(tmp_path / "tuned"), "--to", "hf", "--out", str(tmp_path / "back")]) == 0
    back = tf.AutoModelForCausalLM.from_pretrained(tmp_path / "back").eval()
    tuned = restore(tmp_path / "tuned").model
    with torch.no_grad():
        ours, exported, before = (m(b["input_ids"]).logits for m in (tuned, back, hf))
    scale = float(exported.abs().max())
    torch.testing.assert_close(ours, exported, atol=1e-5 * scale, rtol=1e-5)
    assert (exported - before).abs().max() > 1e-3 * scale  # two steps at lr 1e-2 moved it from the import
