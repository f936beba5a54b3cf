"""A setting whose value is null (``model.qk_norm: null``, no QK-norm) is spelled ``null`` everywhere,
as in YAML and in run ids: table cells, footnotes, compare's variant names; and ``--baseline
model.qk_norm=null`` picks that variant, as a baseline in the spec does."""
import numpy as np
import pytest
from scipy import stats

from arch_zoo.cli import main
from arch_zoo.errors import ConfigError
from arch_zoo.reports import load_runs, summarize
from arch_zoo.reports.tables import display, footnotes

from .sweeps import LOSS, write_null_sweep


def test_baseline_null_on_the_command_line_is_the_null_variant_as_in_the_spec(tmp_path):
    root = write_null_sweep(tmp_path / "qk")
    given = summarize(load_runs(root), baseline=["model.qk_norm=null"]).set_index("variant")
    spec = summarize(load_runs(write_null_sweep(tmp_path / "spec", baseline={"model.qk_norm": None})))
    assert given.loc["qk_norm=null", "baseline"] and not given.loc["qk_norm=rmsnorm", "baseline"]
    delta = np.subtract(LOSS["rope"][:3], LOSS["sinusoidal"][:3])  # rmsnorm's seeds minus null's
    assert given.loc["qk_norm=rmsnorm", "val/loss delta"] == pytest.approx(delta.mean())
    assert given.loc["qk_norm=rmsnorm", "val/loss p"] == pytest.approx(
        stats.ttest_rel(LOSS["rope"][:3], LOSS["sinusoidal"][:3]).pvalue)
    assert spec.set_index("variant")["val/loss delta"].to_dict() == pytest.approx(given["val/loss delta"].to_dict(),
                                                                                nan_ok=True)
    shown = display(summarize(load_runs(root), baseline="qk_norm=null"))  # a short key, one string
    assert shown.set_index("qk_norm").loc["null", "Δ vs baseline [Holm CI]"] == "baseline"  # a cell reading null
    assert any(line.startswith("Δ = variant − baseline (model.qk_norm=null)") for line in footnotes(given))


def test_compare_names_a_null_setting_null_and_takes_it_as_baseline(tmp_path, capsys):
    root = write_null_sweep(tmp_path / "qk")
    dirs = [str(root / "runs" / f"qk_norm-{v}-s{s}") for v in ("null", "rmsnorm") for s in (0, 1, 2)]
    assert sorted(load_runs(dirs)["variant"].unique()) == ["qk_norm=null", "qk_norm=rmsnorm"]
    assert main(["compare", *dirs, "--baseline", "qk_norm=null"]) == 0
    out = capsys.readouterr().out
    assert "None" not in out and "(model.qk_norm=null)" in out
    row = next(line for line in out.splitlines() if line.split()[1:2] == ["null"])
    assert "baseline" in row


def test_baseline_spelt_none_is_refused_with_the_spelling_that_works(tmp_path):
    with pytest.raises(ConfigError, match=r"model.qk_norm=None matches no variant \(null is spelled null, as in YAML: "
                                          r"model.qk_norm=null\); variants: qk_norm=null; qk_norm=rmsnorm"):
        summarize(load_runs(write_null_sweep(tmp_path / "qk")), baseline=["model.qk_norm=None"])
