"""Issue 30 §2: `arch-zoo eval RUN_OR_SWEEP --tasks ...` with the real lm_eval on the tasks these
tests ship, and the model class reached through lm_eval's own registry and command line."""
import json
import subprocess
import sys

import pytest

pytest.importorskip("lm_eval")

from tests.evaluation.helpers import TASKS, in_task_dir, tiny_run  # noqa: E402
from tests.reports.sweeps import write_sweep  # noqa: E402

LIMIT = 3


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A sweep store (rope and alibi, 2 seeds) whose completed runs hold real random models; one failed."""
    root = write_sweep(tmp_path_factory.mktemp("eval") / "pos", {"rope": [2.0, 2.1], "alibi": [2.2, 2.3]},
                       seeds=(0, 1), status={("alibi", 1): ("failed", "OOM")})
    for position in ("rope", "alibi"):
        for seed in (0, 1):
            if (position, seed) != ("alibi", 1):
                tiny_run(root / "runs" / f"{position}-s{seed}", position, seed)
    return root


def _choice_accuracy(run_dir, n):
    """Independent of lm_eval: each question's choices scored by one uncached forward pass over
    context + " " + choice (lm_eval's default target delimiter); the accuracy of the best-scoring
    choice over the first n questions."""
    import torch

    from arch_zoo import restore

    _, model, tok = restore(run_dir)
    docs = [json.loads(line) for line in (TASKS / "zoo_choice.jsonl").read_text().splitlines()][:n]
    right = 0
    for doc in docs:
        scores = []
        for choice in doc["choices"]:
            ctx, whole = tok.encode(doc["context"]), tok.encode(doc["context"] + " " + choice)
            with torch.no_grad():
                logp = model(torch.tensor([whole])).logits[0, :-1].log_softmax(-1)
            targets = torch.tensor(whole[1:])
            scores.append(float(logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)[len(ctx) - 1:].sum()))
        right += int(max(range(len(scores)), key=scores.__getitem__) == doc["label"])
    return right / len(docs)


def test_eval_writes_each_completed_runs_results_and_skips_the_rest(sweep, capsys):
    from arch_zoo.cli import main

    with in_task_dir():
        code = main(["eval", str(sweep), "--tasks", "zoo_choice,zoo_gen", "--include-path", str(TASKS),
                     "--no-builtin-tasks", "--limit", str(LIMIT), "--batch-size", "2"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "skipped 1 run(s) not completed: alibi-s1 (failed)" in err
    assert not (sweep / "runs" / "alibi-s1" / "eval").exists()
    for run in ("rope-s0", "rope-s1", "alibi-s0"):
        records = {p.stem: json.loads(p.read_text()) for p in (sweep / "runs" / run / "eval").glob("*.json")}
        assert sorted(records) == ["zoo_choice", "zoo_gen"]
        choice = records["zoo_choice"]
        assert choice["n_samples"]["effective"] == LIMIT and choice["limit"] == LIMIT
        assert choice["metrics"]["acc"] == pytest.approx(_choice_accuracy(sweep / "runs" / run, LIMIT))
        assert choice["goals"]["acc"] == "max" and records["zoo_gen"]["output_type"] == "generate_until"
        assert f"{sweep / 'runs' / run}  zoo_choice  acc  {choice['metrics']['acc']:.4f}" in out
    assert not list(sweep.rglob("*.tmp"))


def test_lm_evals_registry_and_simple_evaluate_find_the_model_by_name(sweep):
    import lm_eval
    from lm_eval.api.registry import get_model
    from lm_eval.tasks import TaskManager

    import arch_zoo.evaluation

    assert get_model("arch_zoo") is arch_zoo.evaluation.ArchZooLM
    run = sweep / "runs" / "rope-s0"
    with in_task_dir():
        out = lm_eval.simple_evaluate(model="arch_zoo", model_args=f"run={run},batch_size=2", tasks=["zoo_choice"],
                                      limit=LIMIT, task_manager=TaskManager(include_path=str(TASKS),
                                                                            include_defaults=False),
                                      bootstrap_iters=0, verbosity="ERROR")
    assert out["results"]["zoo_choice"]["acc,none"] == pytest.approx(_choice_accuracy(run, LIMIT))


def test_the_model_is_declared_in_lm_evals_plugin_entry_point_group():
    """lm_eval releases with plugin discovery register each `lm_eval.models` entry point under its name
    and load it on first use; the one arch_zoo declares is the class its decorator registers."""
    from importlib.metadata import entry_points

    import arch_zoo.evaluation

    (point,) = [p for p in entry_points(group="lm_eval.models") if p.value.startswith("arch_zoo.")]
    assert point.name == arch_zoo.evaluation.MODEL_NAME
    assert point.load() is arch_zoo.evaluation.ArchZooLM


@pytest.mark.slow
def test_lm_evals_own_command_line_runs_the_model(sweep, tmp_path):
    """lm_eval 0.4 finds no third-party models by itself: `python -m arch_zoo.evaluation` is its CLI
    with `--model arch_zoo` registered."""
    run = sweep / "runs" / "rope-s0"
    proc = subprocess.run([sys.executable, "-m", "arch_zoo.evaluation", "--model", "arch_zoo", "--model_args",
                           f"run={run}", "--tasks", "zoo_choice", "--include_path", str(TASKS), "--limit", str(LIMIT),
                           "--output_path", str(tmp_path / "out")], cwd=TASKS, capture_output=True, text=True,
                          timeout=600, env={**__import__("os").environ, "HF_DATASETS_OFFLINE": "1",
                                            "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "zoo_choice" in proc.stdout and f"{_choice_accuracy(run, LIMIT):.4f}" in proc.stdout


def test_eval_outside_a_git_checkout_prints_nothing_from_git(sweep, tmp_path, capfd, monkeypatch):
    """lm_eval asks git for the working directory's commit; outside a checkout nothing of git's
    ("fatal: not a git repository") reaches the terminal, at the file-descriptor level."""
    import shutil

    from arch_zoo.cli import main

    tasks = tmp_path / "tasks"
    shutil.copytree(TASKS, tasks)
    probe = subprocess.run(["git", "-C", str(tasks), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert probe.returncode != 0 and "not a git repository" in probe.stderr  # the case under test
    for k, v in {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.chdir(tasks)
    capfd.readouterr()
    code = main(["eval", str(sweep / "runs" / "rope-s0"), "--tasks", "zoo_choice", "--include-path", str(tasks),
                 "--no-builtin-tasks", "--limit", "2"])
    out, err = capfd.readouterr()
    assert code == 0, err
    assert "zoo_choice" in out and "fatal" not in err and "git" not in err.lower(), err
