"""A tuned sweep's choice never compares tokenizations by loss per token: where one variant's tuned
values tokenize the text differently (their runs' bytes per token differ), stage 1 chooses by bits
per byte and says so; where they share the tokenization (a learning rate), it keeps tune.select."""
from arch_zoo.sweeps.fields import TuneSpec
from arch_zoo.sweeps.tune import choose, per_byte_rows

SEEDS = (0, 1)


def _rows(key, per_value, other="position=rope"):
    """(rows, measured) for one variant: per value, its (loss, bpb, bytes per token) on both seeds."""
    rows, measured = [], []
    for value, (loss, bpb, bpt) in per_value.items():
        for seed in SEEDS:
            rows.append(({"model.position": other, key: value}, seed, "completed", loss + 0.01 * seed))
            measured.append((bpb + 0.01 * seed, bpt))
    return rows, measured


def test_a_tuned_tokenizer_is_chosen_by_bits_per_byte_with_the_reason():
    tune = TuneSpec("task.tokenizer", ("char", "bpe"), SEEDS)
    # char: lower loss per token, but each token covers a third of the text: more bits per byte
    rows, measured = _rows("task.tokenizer", {"char": (1.5, 2.16, 1.0), "bpe": (3.0, 1.44, 3.0)})
    assert choose(tune, rows)["[('model.position', 'position=rope')]"].value == "char"  # by loss: the wrong call
    switched_rows, switched = per_byte_rows(tune, rows, measured)
    chosen = choose(tune, switched_rows)
    (label, (metric, why)), = switched.items()
    assert chosen[label].value == "bpe" and metric == "val/bpb"
    assert chosen[label].scores["bpe"] == (1.44 + 1.45) / 2
    assert why.startswith("ranked by val/bpb, not val/loss: val/loss is per token")


def test_a_tuned_learning_rate_keeps_the_loss():
    tune = TuneSpec("train.lr", (1e-3, 3e-3), SEEDS)
    rows, measured = _rows("train.lr", {1e-3: (1.5, 2.0, 2.5), 3e-3: (1.4, 1.9, 2.5)})
    same_rows, switched = per_byte_rows(tune, rows, measured)
    assert same_rows == rows and switched == {}
