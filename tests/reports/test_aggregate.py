"""The numbers: every statistic of the per-variant table equals scipy's on runs with known metrics."""
import json
import math

import numpy as np
import pytest
from scipy import stats

from arch_zoo.reports import load_runs, summarize
from tests.reports.sweeps import ACC, LOSS, SEEDS, STATUS, config, write_run, write_sweep


def completed(variant):
    return [s for s in SEEDS if (variant, s) not in STATUS]


@pytest.fixture
def table(tmp_path):
    return summarize(load_runs(write_sweep(tmp_path / "pos"))).set_index("variant")


def test_mean_std_ci_and_best_seed_match_scipy(table):
    for variant, losses in LOSS.items():
        seeds = completed(variant)
        x = np.array([losses[s] for s in seeds])
        row = table.loc[f"position={variant}"]
        low, high = stats.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=stats.sem(x))
        assert row["val/loss n"] == len(x) == (4 if variant == "sinusoidal" else 3)
        assert row["val/loss mean"] == pytest.approx(x.mean(), abs=1e-12)
        assert row["val/loss std"] == pytest.approx(np.std(x, ddof=1), abs=1e-12)
        assert (row["val/loss ci_low"], row["val/loss ci_high"]) == pytest.approx((low, high), abs=1e-12)
        assert row["val/loss best_seed"] == seeds[int(np.argmin(x))]
        assert row["val/loss best"] == pytest.approx(x.min())


def test_paired_delta_ci_and_p_match_ttest_rel(table):
    for variant in ("rope", "alibi"):
        seeds = [s for s in completed(variant) if s in completed("sinusoidal")]
        a = np.array([LOSS[variant][s] for s in seeds])
        b = np.array([LOSS["sinusoidal"][s] for s in seeds])
        result = stats.ttest_rel(a, b)
        d = a - b
        low, high = stats.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=stats.sem(d))
        row = table.loc[f"position={variant}"]
        assert row["baseline_variant"] == "position=sinusoidal"
        assert row["val/loss n_paired"] == len(seeds) == 3  # the failed / diverged seed is not paired
        assert row["val/loss delta"] == pytest.approx(d.mean(), abs=1e-12)
        assert row["val/loss p"] == pytest.approx(result.pvalue, rel=1e-9)
        assert (row["val/loss delta_ci_low"], row["val/loss delta_ci_high"]) == pytest.approx((low, high), abs=1e-12)
        assert (low, high) == pytest.approx(tuple(result.confidence_interval(0.95)), abs=1e-12)
    base = table.loc["position=sinusoidal"]
    assert bool(base["baseline"]) and base["val/loss delta"] == 0


def test_rank_follows_the_metric_goal(tmp_path):
    runs = load_runs(write_sweep(tmp_path / "pos"))
    by_loss = summarize(runs)
    means = {v: np.mean([LOSS[v][s] for s in completed(v)]) for v in LOSS}
    assert list(by_loss["variant"]) == [f"position={v}" for v in sorted(means, key=means.get)]
    assert list(by_loss["rank"]) == [1, 2, 3]
    by_acc = summarize(runs, metric="val/token_accuracy")  # accuracy: higher is better
    accs = {v: np.mean([ACC[v][s] for s in completed(v)]) for v in ACC}
    assert list(by_acc["variant"]) == [f"position={v}" for v in sorted(accs, key=accs.get, reverse=True)]
    row = by_acc.set_index("variant").loc["position=sinusoidal"]
    assert row["val/token_accuracy best_seed"] == int(np.argmax(ACC["sinusoidal"]))
    assert by_acc.attrs["goal"] == "max" and by_loss.attrs["goal"] == "min"


def test_failed_and_diverged_are_counted_not_averaged(table):
    rope, alibi = table.loc["position=rope"], table.loc["position=alibi"]
    assert (rope["seeds"], rope["completed"], rope["failed"], rope["diverged"]) == (4, 3, 1, 0)
    assert (alibi["seeds"], alibi["completed"], alibi["failed"], alibi["diverged"]) == (4, 3, 0, 1)
    # the diverged seed logged a finite accuracy, which must not enter the mean
    assert alibi["val/token_accuracy n"] == 3
    assert alibi["val/token_accuracy mean"] == pytest.approx(np.mean([ACC["alibi"][s] for s in (0, 1, 2)]))
    assert "seed 2 failed: CUDA out of memory" in rope["notes"]
    assert "seed 3 diverged" in alibi["notes"]


def test_partial_sweep_reports_running_failed_and_pending(tmp_path):
    status = {("rope", 1): ("running", None), ("alibi", 0): ("failed", "Traceback\nRuntimeError: boom")}
    runs = load_runs(write_sweep(tmp_path / "pos", status=status, pending=[("alibi", 3)]))
    assert len(runs) == 12  # the pending run has no dir yet but is in index.csv
    got = runs.set_index(["variant", "seed"])["status"]
    assert got[("position=rope", 1)] == "running"
    assert got[("position=alibi", 0)] == "failed" and got[("position=alibi", 3)] == "pending"
    table = summarize(runs).set_index("variant")
    assert (table.loc["position=rope", "running"], table.loc["position=rope", "completed"]) == (1, 3)
    assert (table.loc["position=alibi", "failed"], table.loc["position=alibi", "pending"]) == (1, 1)
    notes = "\n".join(table.attrs["notes"])
    assert "9 of 12 runs completed" in notes
    assert "running: position=rope seed 1" in notes
    assert "failed: position=alibi seed 0 (Traceback RuntimeError: boom)" in notes
    assert "pending: position=alibi seed 3" in notes


def test_grid_baseline_compares_with_the_variant_sharing_the_other_settings(tmp_path):
    """position x norm with baseline position=sinusoidal: rope+rmsnorm vs sinusoidal+rmsnorm."""
    values = {("sinusoidal", "layernorm"): [3.0, 3.2, 3.1], ("sinusoidal", "rmsnorm"): [2.0, 2.3, 2.1],
              ("rope", "layernorm"): [2.9, 3.0, 3.05], ("rope", "rmsnorm"): [1.8, 2.2, 1.9]}
    root = tmp_path / "grid"
    (root / "runs").mkdir(parents=True)
    (root / "sweep.yaml").write_text(json.dumps({"name": "grid", "baseline": {"model.position": "sinusoidal"}}))
    for (pos, norm), losses in values.items():
        for seed, loss in enumerate(losses):
            write_run(root / "runs" / f"{pos}-{norm}-{seed}", status="completed", seed=seed,
                      settings={"model.position": pos, "model.norm": norm}, variant=f"position={pos},norm={norm}",
                      final={"val/loss": loss}, cfg=config(pos, seed, **{"model.norm": norm}))
    table = summarize(load_runs(root)).set_index("variant")
    row = table.loc["position=rope,norm=rmsnorm"]
    assert row["baseline_variant"] == "position=sinusoidal,norm=rmsnorm"
    a, b = values[("rope", "rmsnorm")], values[("sinusoidal", "rmsnorm")]
    assert row["val/loss p"] == pytest.approx(stats.ttest_rel(a, b).pvalue)
    assert table.loc["position=rope,norm=layernorm", "baseline_variant"] == "position=sinusoidal,norm=layernorm"
    assert "Δ is against the baseline variant sharing most other settings: " in "\n".join(table.attrs["notes"])
    assert "position=rope,norm=rmsnorm vs position=sinusoidal,norm=rmsnorm" in "\n".join(table.attrs["notes"])
    assert "a tie" not in "\n".join(table.attrs["notes"])
    # an explicit --baseline overrides the sweep's
    other = summarize(load_runs(root), baseline=["norm=layernorm"]).set_index("variant")
    assert other.loc["position=rope,norm=rmsnorm", "baseline_variant"] == "position=rope,norm=layernorm"


def test_loose_run_dirs_group_by_differing_config(tmp_path):
    """compare: runs without run.json are told apart by their configs; seeds of one config pair up."""
    losses = {"rope": [1.0, 1.2, 1.1], "alibi": [1.3, 1.25, 1.5]}
    dirs = []
    for pos, values in losses.items():
        for seed, loss in enumerate(values):
            d = tmp_path / f"{pos}{seed}"
            write_run(d, status="completed", seed=seed, settings={}, variant="", final={"val/loss": loss},
                      cfg=config(pos, seed))
            (d / "run.json").unlink()
            dirs.append(d)
    runs = load_runs(dirs)
    assert runs.attrs["settings"] == ["model.position"]
    assert sorted(set(runs["variant"])) == ["position=alibi", "position=rope"]
    table = summarize(runs, baseline={"position": "alibi"}).set_index("variant")
    assert table.loc["position=rope", "val/loss p"] == pytest.approx(
        stats.ttest_rel(losses["rope"], losses["alibi"]).pvalue)
    assert math.isclose(table.loc["position=rope", "val/loss mean"], np.mean(losses["rope"]))


def test_running_run_whose_lock_nobody_holds_reads_as_interrupted(tmp_path):
    """The sweep store's convention: a trainer holds runs/<id>/.lock (flock) while it runs; a
    planned run has run.json but no status yet."""
    import fcntl
    import os

    root = write_sweep(tmp_path / "pos", status={("rope", 0): ("running", None), ("rope", 1): ("running", None)})
    (root / "runs" / "rope-s0" / ".lock").touch()  # its process died: nobody holds the lock
    held = os.open(root / "runs" / "rope-s1" / ".lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)
    planned = root / "runs" / "rope-s2"
    for name in ("status.json", "summary.json", "metrics.csv", "config.yaml"):
        (planned / name).unlink(missing_ok=True)
    try:
        got = load_runs(root).set_index("run_id")
    finally:
        os.close(held)
    assert got.loc["rope-s0", "status"] == "interrupted" and got.loc["rope-s0", "reason"] == "its process died"
    assert got.loc["rope-s1", "status"] == "running"
    assert got.loc["rope-s2", "status"] == "pending"


def test_lengths_a_run_could_not_evaluate_are_named_not_averaged(tmp_path):
    root = write_sweep(tmp_path / "pos", status={})
    for run in (root / "runs").glob("rope-*"):
        summary = json.loads((run / "summary.json").read_text())
        summary["final"].pop("val@512/loss")
        summary["task"] = {"not_evaluated": {"val@512": "position 'rope' represents at most 256 positions"}}
        (run / "summary.json").write_text(json.dumps(summary))
    table = summarize(load_runs(root))
    rope = table.set_index("variant").loc["position=rope"]
    assert rope["val@512/loss n"] == 0 and math.isnan(rope["val@512/loss mean"])
    assert any(n.startswith("position=rope: not evaluated") and "at most 256 positions" in n
               for n in table.attrs["notes"])


def test_the_display_shows_every_evaluation_length_loss_before_other_metrics(tmp_path):
    from arch_zoo.reports.tables import display

    extra = {f"val@{n}/token_accuracy": 0.5 for n in (256, 512)}
    table = summarize(load_runs(write_sweep(tmp_path / "pos", status={}, extra=extra)))
    columns = list(display(table).columns)
    # the metrics beside the ranked val/loss: every loss, then the accuracies (6 at most)
    assert columns[columns.index("best seed") + 1:] == [
        "val@256/loss", "val@512/loss", "test/loss", "val/token_accuracy", "val@256/token_accuracy",
        "val@512/token_accuracy"]


def test_a_tie_between_baseline_variants_is_named(tmp_path):
    """rope+layernorm+swiglu shares one other setting with each baseline variant: the note says the
    tie was broken by the first, instead of hiding which one Δ is against."""
    values = {("sinusoidal", "layernorm", "gelu"): [3.0, 3.1, 3.2], ("sinusoidal", "rmsnorm", "swiglu"): [2.0, 2.1, 2.3],
              ("rope", "layernorm", "swiglu"): [2.5, 2.6, 2.4]}
    root = tmp_path / "tie"
    (root / "runs").mkdir(parents=True)
    (root / "sweep.yaml").write_text(json.dumps({"name": "tie", "baseline": {"model.position": "sinusoidal"}}))
    for (pos, norm, ffn), losses in values.items():
        for seed, loss in enumerate(losses):
            write_run(root / "runs" / f"{pos}-{norm}-{ffn}-{seed}", status="completed", seed=seed,
                      settings={"model.position": pos, "model.norm": norm, "model.ffn": ffn},
                      variant=f"{pos},{norm},{ffn}", final={"val/loss": loss},
                      cfg=config(pos, seed, **{"model.norm": norm, "model.ffn": ffn}))
    notes = "\n".join(summarize(load_runs(root)).attrs["notes"])
    assert "a tie, broken by the first baseline variant, for rope,layernorm,swiglu vs sinusoidal," in notes, notes
