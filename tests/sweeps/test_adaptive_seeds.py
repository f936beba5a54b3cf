"""Adaptive seeds (issue 56 item 3): ``seeds: {start, max}`` trains every variant on the first seeds,
then adds seeds in rounds only to the comparisons still undecided, from the run store each time, so a
rerun trains nothing new and takes the same decisions."""
import pytest

from arch_zoo.cli import main
from arch_zoo.rundir import STATUS, SUMMARY, write_json
from arch_zoo.sweeps import load_spec, make_plan
from arch_zoo.sweeps.seed_rounds import next_round, pairs
from arch_zoo.sweeps.store import Store

from .conftest import write_spec
from .test_sigkill import hooked  # noqa: F401 - the kill-hook fixture

# three variants: a learning rate that cannot train (differs a lot), and the other attention kernel
# (the same function: equivalent), each against the baseline
SPEC = {"name": "adaptive", "zip": {"train.lr": [1.0e-2, 1.0e-5, 1.0e-2],
                                   "model.attention_kernel": ["sdpa", "sdpa", "explicit"]},
        "seeds": {"start": 2, "max": 4}, "baseline": {"train.lr": 1.0e-2, "model.attention_kernel": "sdpa"}}


def _finish(store: Store, run, value: float) -> None:
    d = store.run_dir(run.run_id)
    d.mkdir(parents=True, exist_ok=True)
    write_json(d / STATUS, {"status": "completed"})
    write_json(d / SUMMARY, {"final": {"val/loss": value}})


def _values(variant: str, seed: int) -> float:
    """val/loss by seed: the lr variant 1 nat worse with a spread of 0.05 (t 20 at 2 seeds, 34 at 3),
    the other kernel equal to float rounding."""
    base = 3.0 + 0.01 * ((seed * 7919) % 13) / 13
    if variant == "lr=1.0e-05,attention_kernel=sdpa":
        return base + 1.0 + (0.05, -0.05, 0.02, 0.0)[seed]
    return base + (1e-7 if variant == "lr=0.01,attention_kernel=explicit" else 0.0)


def test_a_round_adds_seeds_only_to_the_undecided_comparison_and_its_baseline(spec_dir, tmp_path):
    spec = load_spec(write_spec(spec_dir, SPEC))
    plan = make_plan(spec)
    assert sorted({r.seed for r in plan.runs}) == [0, 1] and len(plan.runs) == 6
    store = Store(tmp_path / "adaptive")
    store.write_plan(plan)
    for run in plan.runs:
        _finish(store, run, _values(run.variant, run.seed))
    found = {p.variant: p for p in pairs(plan, store)[0]}
    assert found["lr=0.01,attention_kernel=explicit"].look.decided == "equivalent"
    assert found["lr=1.0e-05,attention_kernel=sdpa"].look.decided == ""  # 2 seeds: the first look spends ~0
    more = next_round(plan, store, print)
    assert sorted((r.variant, r.seed) for r in more) == [("lr=0.01,attention_kernel=sdpa", 2),
                                                          ("lr=1.0e-05,attention_kernel=sdpa", 2)]
    # the added runs are the full design's: same ids and configs as a fixed 4-seed sweep plans them
    fixed = {r.run_id: r for r in make_plan(load_spec(write_spec(spec_dir, {**SPEC, "seeds": [0, 1, 2, 3]},
                                                                 name="fixed.yaml"))).runs}
    for r in more:
        assert r.run_id in fixed and r.config == fixed[r.run_id].config
    # an unfinished run holds the next round back; none is planned twice
    plan.runs += more
    assert next_round(plan, store, print) == []
    for run in more:
        _finish(store, run, _values(run.variant, run.seed))
    assert [p.look.decided for p in pairs(plan, store)[0] if p.variant.startswith("lr=1.0e-05")] == ["differs"]
    assert next_round(plan, store, print) == []  # every comparison decided: no fourth seed for anyone


def test_a_pair_at_max_seeds_gets_no_more(spec_dir, tmp_path):
    spec = load_spec(write_spec(spec_dir, {**SPEC, "seeds": {"start": 2, "max": 2}}))
    plan = make_plan(spec)
    store = Store(tmp_path / "s")
    for run in plan.runs:  # no effect at all: undecided, but at max
        _finish(store, run, 3.0 + 0.1 * run.seed + (0.05 if run.variant.startswith("lr=1.0e-05") else 0.0) * run.seed)
    assert next_round(plan, store, print) == []


def test_a_sweep_trains_the_rounds_and_a_rerun_trains_nothing(spec_dir, tmp_path, capsys):
    path = write_spec(spec_dir, SPEC)
    out = tmp_path / "runs"
    assert main(["sweep", str(path), "--out", str(out), "--workers", "1"]) == 0
    text = capsys.readouterr().out
    store = Store(out / "adaptive")
    seeds = {}
    for d in (out / "adaptive" / "runs").iterdir():
        if (store.run_dir(d.name) / SUMMARY).exists():
            variant, seed = d.name.rsplit("-s", 1)[0], int(d.name.rsplit("-s", 1)[1].split("-")[0])
            seeds.setdefault(variant, set()).add(seed)
    assert seeds["lr-0.01__attention_kernel-explicit"] == {0, 1}  # equivalent at the first look
    assert seeds["lr-1.0e05__attention_kernel-sdpa"] == {0, 1, 2}  # decided at the second
    assert seeds["lr-0.01__attention_kernel-sdpa"] == {0, 1, 2}
    assert "seeds: every comparison is decided" in text
    _check_report(out / "adaptive")
    assert main(["sweep", str(path), "--out", str(out), "--workers", "1"]) == 0
    again = capsys.readouterr().out
    assert "0 to run" in again and "completed  val/loss" not in again


def _check_report(store_dir):
    """The report judges each pair by its last look's repeated interval: recomputed here from the runs'
    values with scipy's t quantile at the design's boundary."""
    import math

    import numpy as np
    from scipy import stats

    from arch_zoo.reports import load_runs, summarize
    from arch_zoo.sequential import Design

    runs = load_runs(store_dir)
    table = summarize(runs).set_index("variant")
    values = {v: dict(zip(g["seed"], g["val/loss"])) for v, g in runs.groupby("variant")}
    base = values["lr=0.01,attention_kernel=sdpa"]
    worse = values["lr=1.0e-05,attention_kernel=sdpa"]
    d = np.array([worse[s] - base[s] for s in sorted(worse)])
    crit = Design((2, 3, 4), 0.05, "obrien-fleming", 2).critical()[1]  # the second look, at 3 seeds
    half = crit * d.std(ddof=1) / math.sqrt(3)
    row = table.loc["lr=1.0e-05,attention_kernel=sdpa"]
    assert (row["val/loss verdict_ci_low"], row["val/loss verdict_ci_high"]) == pytest.approx((d.mean() - half,
                                                                                              d.mean() + half))
    assert row["val/loss verdict"] == "worse" and math.isnan(row["val/loss p_holm"])
    assert crit == pytest.approx(stats.t.isf(Design((2, 3, 4), 0.05, pairs=2).level(3) / 2, 2))
    notes = " ".join(table.attrs["notes"])
    assert "O'Brien-Fleming alpha spending" in notes and "Runs: 8 of the fixed design's 12 (4 saved)" in notes
    assert "lr=1.0e-05,attention_kernel=sdpa: looks at 2, 3 seeds, decided at 3" in notes
    from arch_zoo.reports.tables import footnotes

    assert "with adaptive seeds, the repeated confidence interval of each pair's last look" in footnotes(table)[0]


@pytest.mark.parametrize("seeds, expected", [
    ({"start": 3, "max": 2}, "seeds.max: is 2, below seeds.start (3)"),
    ({"start": 1, "max": 4}, "seeds.start: expected an integer of at least 2"),
    ({"start": 3}, "seeds.max: missing"),
    ({"start": 3, "max": 5, "rule": "pocok"}, "seeds.rule: expected one of obrien-fleming, pocock, got 'pocok' "
                                              "(did you mean 'pocock'?)"),
    ({"start": 3, "max": 5, "alpha": 1.5}, "seeds.alpha: expected a level in (0, 1)"),
    ({"start": 3, "max": 5, "stride": 2}, "seeds.stride: unknown key"),
])
def test_bad_adaptive_seeds_are_one_line_naming_the_key(seeds, expected, spec_dir, tmp_path, capsys):
    path = write_spec(spec_dir, {**SPEC, "seeds": seeds})
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err, err
    assert not out.exists()


def test_the_dry_run_says_what_the_rounds_may_add(spec_dir, tmp_path, capsys):
    path = write_spec(spec_dir, {**SPEC, "seeds": {"start": 3, "max": 8, "step": 2, "rule": "pocock"}})
    assert main(["sweep", str(path), "--out", str(tmp_path / "o"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert ("seeds: adaptive (Pocock alpha spending, 0.05 two-sided over the comparisons): seeds 0-2 first, then "
            "2 seeds a round to each comparison still undecided, up to 8 (looks at 3, 5, 7, 8 seeds); "
            "9 to 24 evaluation runs") in out
    assert "9 runs;" in out


@pytest.mark.slow  # ~50 s of real SIGKILLs; CI keeps the round logic's resume from the store (test_a_sweep_trains_the_rounds_and_a_rerun_trains_nothing)
def test_a_sweep_killed_between_rounds_resumes_to_the_same_runs(spec_dir, tmp_path, hooked):
    """SIGKILL of the whole sweep while it writes the second round's first run.json (the 7th: the first
    round wrote 6); the rerun decides the same round from the store and ends where an uninterrupted sweep
    does: the undecided pair and its baseline at 3 seeds, the equivalent one at 2."""
    import subprocess

    from .conftest import cli
    from .test_sigkill import arm

    path = write_spec(spec_dir, SPEC)
    out = tmp_path / "runs"
    arm(hooked, ("rename", "run.json", 7), "group", 0)
    killed = subprocess.run(cli("sweep", path, "--out", out, "--workers", "1"), start_new_session=True,
                            capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert "seeds: 2 more run(s)" in killed.stdout
    resumed = subprocess.run(cli("sweep", path, "--out", out, "--workers", "1"), capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "6 completed already" in resumed.stdout
    done = sorted(d.name.rsplit("-", 1)[0] for d in (out / "adaptive" / "runs").iterdir()
                  if (d / SUMMARY).exists())
    assert done == sorted([f"lr-0.01__attention_kernel-sdpa-s{s}" for s in (0, 1, 2)]
                          + [f"lr-1.0e05__attention_kernel-sdpa-s{s}" for s in (0, 1, 2)]
                          + [f"lr-0.01__attention_kernel-explicit-s{s}" for s in (0, 1)])


def test_a_tuned_sweep_adds_seeds_at_each_variants_chosen_value(spec_dir, tmp_path):
    """A round after stage 2 plans the design's runs from stage 1's choices, read from stage 1's runs
    only: stage 2's own runs (at the chosen value, on other seeds) are no tuning evidence."""
    from arch_zoo.sweeps.plan import Plan
    from arch_zoo.sweeps.stages import second_stage

    tuned = {"name": "tuned", "grid": {"model.attention_kernel": ["sdpa", "explicit"]},
             "baseline": {"model.attention_kernel": "sdpa"}, "seeds": {"start": 2, "max": 3},
             "tune": {"key": "train.lr", "values": [1.0e-3, 1.0e-2, 3.0e-2], "seeds": [100], "select": "val/loss"}}
    spec = load_spec(write_spec(spec_dir, tuned))
    plan = make_plan(spec)
    store = Store(tmp_path / "tuned")
    for run in plan.runs:  # stage 1: the middle value wins for both variants
        _finish(store, run, 3.0 - (0.5 if run.settings["train.lr"] == 1.0e-2 else 0.0))
    second = second_stage(plan, store, print)
    assert {r.settings["train.lr"] for r in second.runs} == {1.0e-2}
    for run in second.runs:  # stage 2 at seeds 0, 1: undecided (one pair of seeds disagrees in sign)
        _finish(store, run, 2.5 + (0.01 * (-1) ** run.seed if run.settings["model.attention_kernel"] == "explicit"
                                   else 0.0))
    both = Plan(spec, plan.runs + second.runs, second.axes, second.names)
    more = next_round(both, store, print)
    assert sorted((r.settings["model.attention_kernel"], r.settings["train.lr"], r.seed) for r in more) == [
        ("explicit", 1.0e-2, 2), ("sdpa", 1.0e-2, 2)]
