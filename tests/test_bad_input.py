"""User mistakes across every `arch-zoo` command and every file or argument it reads.

README: "A user mistake prints one line and exits 2". Each case checks exit code 2, exactly one
stderr line starting `arch-zoo: error:` that names the file or key, no traceback, and that nothing
was created or changed (the whole workspace, the current directory included, is compared before
and after, so no half-created run dir, report dir or sweep store is left behind). Most cases call
``arch_zoo.cli.main`` in-process (the CLI's whole error path, without seconds of interpreter start-up
each); a few run the installed console script in a real process."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from arch_zoo.cli import main
from tests.reports.ladders import write_ladder
from tests.reports.sweeps import write_null_sweep, write_sweep

MODEL = {"kind": "decoder", "d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32, "max_seq_len": 32}
EXPERIMENT = {"name": "tiny", "model": MODEL, "task": {"name": "char_lm", "max_chars": 20000, "seq_len": 32},
              "train": {"max_steps": 2, "batch_size": 4, "val_every": 2, "val_batches": 1, "progress_bar": False,
                        "exact_match_samples": 0}}


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    """A workspace holding every kind of bad file next to good ones, and a real trained run."""
    ws = tmp_path_factory.mktemp("ws")
    (ws / "exp.yaml").write_text(yaml.safe_dump(EXPERIMENT))
    (ws / "malformed.yaml").write_text("name: x\nmodel: [1, 2\n")
    (ws / "empty.yaml").write_text("# nothing but a comment\n")
    (ws / "list.yaml").write_text("- model\n- task\n")
    (ws / "latin1.yaml").write_bytes("name: caf\xe9\n".encode("latin-1"))
    (ws / "bad_base.yaml").write_text(yaml.safe_dump({**EXPERIMENT, "model": {"base": "malformed.yaml"}}))
    (ws / "file.txt").write_text("not a directory\n")
    (ws / "a_dir").mkdir()
    spec = {"base": "exp.yaml", "grid": {"model.position": ["rope", "alibi"]}, "seeds": [0]}
    (ws / "spec.yaml").write_text(yaml.safe_dump({"name": "s", **spec}))
    (ws / "spec_missing_base.yaml").write_text(yaml.safe_dump({"name": "s2", **spec, "base": "nope.yaml"}))
    (ws / "spec_malformed_base.yaml").write_text(yaml.safe_dump({"name": "s3", **spec, "base": "malformed.yaml"}))
    (ws / "spec_bad_value.yaml").write_text(yaml.safe_dump({"name": "s5", **spec,
                                                             "grid": {"model.position": ["rope", "rop"]}}))
    (ws / "spec_unknown_key.yaml").write_text(yaml.safe_dump({"name": "s4", **spec, "seed": [0]}))
    (ws / "spec_bad_optimizer.yaml").write_text(yaml.safe_dump({"name": "s7", **spec,
                                                                 "grid": {"train.optimizer": ["adamw", "muonn"]}}))
    tune = {"key": "train.lr", "values": [1.0e-3, 1.0e-2], "seeds": [9]}
    for name, bad in (("overlap", {"seeds": [0, 1]}), ("select", {"select": "val/exact_match"}),
                      ("axis", {"key": "model.position"}), ("range", {"values": {"min": 1.0e-3, "max": 1.0e-2,
                                                                                  "n": 0}})):
        (ws / f"spec_tune_{name}.yaml").write_text(yaml.safe_dump({"name": f"t{name}", **spec,
                                                                    "tune": {**tune, **bad}}))
    for name, scale in (("key", {"sizes": [{"d_model": 16, "lr": 0.1}]}),
                        ("order", {"sizes": [{"d_model": 32}, {"d_model": 16}]}),
                        ("budget", {"sizes": [{"d_model": 16}], "budget": {"tokens_per_param": 20, "flops": [1e9]}}),
                        ("warmup", {"sizes": [{"d_model": 16}], "warmup_fraction": 0.1})):
        (ws / f"spec_scale_{name}.yaml").write_text(yaml.safe_dump({"name": f"l{name}", **spec,
                                                                     "scale": {**scale, "fit": False}}))
    small = {"n_train": 16, "n_val": 4, "n_test": 4}
    for name, entry in (("task", {"task": "copyy"}), ("option", {"task": "copy", "options": {"n_symbolz": 3}}),
                        ("rejected", {"task": "copy", "options": {**small, "min_len": 9, "max_len": 4}})):
        suite = {"tasks": [{"task": "reverse", "options": small}, entry]}
        (ws / f"spec_suite_{name}.yaml").write_text(yaml.safe_dump({"name": f"u{name}", **spec, "suite": suite}))
    (ws / "spec_suite_shipped.yaml").write_text(yaml.safe_dump({"name": "ushipped", **spec, "suite": "madd"}))
    write_sweep(ws / "sweep")
    write_sweep(ws / "tb_blocked", seeds=(0,))  # a file where its TensorBoard log dir would go
    (ws / "tb_blocked" / "tensorboard").write_text("")
    write_null_sweep(ws / "nulls")
    write_sweep(ws / "sweep_unfinished", {"rope": [2.0], "alibi": [2.1]}, seeds=(0,),
                status={("rope", 0): ("failed", "OOM"), ("alibi", 0): ("interrupted", "SIGTERM")})
    write_ladder(ws / "ladder", {"relu": (1.5, 60.0, 0.15), "swiglu": (1.4, 55.0, 0.15)})
    (ws / "plugin_syntax.py").write_text("def broken(:\n")
    (ws / "plugin_raises.py").write_text("from arch_zoo.components.norms import NORMS\n"
                                         "NORMS.register('half_done')(type('Half', (), {}))\n"
                                         "raise RuntimeError('no GPU here')\n")
    (ws / "plugin_dup.py").write_text("from arch_zoo.components.positions import POSITIONS, PositionScheme\n"
                                      "POSITIONS.register('rope')(type('MyRope', (PositionScheme,), {}))\n")
    for name, plugins in (("missing", ["./nope.py"]), ("syntax", ["plugin_syntax.py"]),
                          ("raises", ["plugin_raises.py"]), ("dup", ["plugin_dup.py"]),
                          ("module", ["no_such_lab.blocks"]), ("notalist", {"a": 1})):
        (ws / f"plugins_{name}.yaml").write_text(yaml.safe_dump({**EXPERIMENT, "plugins": plugins}))
    (ws / "spec_plugin.yaml").write_text(yaml.safe_dump({"name": "s6", **spec, "base": "plugins_raises.yaml"}))
    (ws / "cross_rope.yaml").write_text(yaml.safe_dump({"name": "x", "model": {
        **MODEL, "kind": "encoder_decoder", "position": "rope", "cross_attention_position": True,
        "layers": [{"stack": "decoder", "position": "alibi", "head_dim": 5}]}}))

    assert main(["train", str(ws / "exp.yaml"), "--out", str(ws / "run"), "--quiet"]) == 0
    for name, damage in (("bad_tokenizer", "tokenizer.json"), ("bad_config", "config.yaml"),
                         ("bad_ckpt", "checkpoints/last.ckpt")):
        shutil.copytree(ws / "run", ws / name)
        (ws / name / damage).write_text("{not: [valid")
    shutil.copytree(ws / "run", ws / "bad_resume")  # an interrupted run whose checkpoint was cut short
    (ws / "bad_resume" / "status.json").write_text(json.dumps({"status": "interrupted"}))
    ckpt = ws / "bad_resume" / "checkpoints" / "last.ckpt"
    ckpt.write_bytes(ckpt.read_bytes()[:1000])
    shutil.copytree(ws / "run", ws / "no_tokenizer")
    (ws / "no_tokenizer" / "tokenizer.json").unlink()
    shutil.copytree(Path(__file__).parent / "evaluation" / "tasks", ws / "tasks")  # lm_eval task files (arch-zoo eval)
    shutil.copytree(ws / "tasks", ws / "bad_tasks")
    (ws / "bad_tasks" / "zoo_broken.yaml").write_text("task: zoo_broken\ndoc_to_text: [unclosed\n")
    _encoder_run(ws / "run", ws / "encoder_run")
    return ws


def _encoder_run(decoder_run: Path, out: Path) -> None:
    """A run directory holding an encoder (a model that cannot score loglikelihoods)."""
    from arch_zoo.data.tokenizers import load_tokenizer
    from arch_zoo.interop.as_run import save_as_run
    from arch_zoo.models import build_model

    tokenizer = load_tokenizer(decoder_run)
    save_as_run(build_model({**MODEL, "kind": "encoder", "head": "mlm"}, tokenizer.vocab_size), tokenizer, out)


# (id, argv with {ws} for the workspace, text the error line must contain)
CASES = [
    # experiment configs and overrides (describe, train, gradnorms share the loader)
    ("describe-malformed-yaml", "describe {ws}/malformed.yaml",
     "config: cannot parse {ws}/malformed.yaml (line 3, column 1): did not find expected ',' or ']'"),
    ("describe-empty-config", "describe {ws}/empty.yaml", "config: {ws}/empty.yaml is empty"),
    ("describe-list-config", "describe {ws}/list.yaml", "config: {ws}/list.yaml must hold a mapping, not list"),
    ("describe-not-utf8", "describe {ws}/latin1.yaml", "config: cannot parse {ws}/latin1.yaml"),
    ("describe-missing-config", "describe {ws}/nope.yaml", "config: file not found: {ws}/nope.yaml"),
    ("describe-directory-config", "describe {ws}/a_dir", "config: {ws}/a_dir is a directory"),
    ("describe-unknown-preset", "describe preset:gpt3", "config: unknown preset 'gpt3'"),
    ("describe-malformed-model-base", "describe {ws}/bad_base.yaml",
     "model.base: cannot parse {ws}/malformed.yaml (line 3, column 1)"),
    ("describe-override-without-value", "describe {ws}/exp.yaml model.position",
     "model.position: an override must look like key=value"),
    ("describe-override-unknown-key", "describe {ws}/exp.yaml model.positon=rope",
     "model.positon: unknown key (did you mean 'position'?)"),
    ("describe-override-bad-type", "describe {ws}/exp.yaml model.d_model=big",
     "model.d_model: expected an integer, got 'big'"),
    ("describe-attention-diagnostics-every-without-the-switch",
     "describe {ws}/exp.yaml train.attention_diagnostics_every=10",
     "train.attention_diagnostics_every: records training steps only with train.attention_diagnostics: true"),
    ("describe-attention-diagnostics-between-rows",
     "describe {ws}/exp.yaml train.attention_diagnostics=true train.attention_diagnostics_every=15",
     "train.attention_diagnostics_every: must be a multiple of train.log_every (10), got 15"),
    ("describe-unknown-precision", "describe {ws}/exp.yaml train.precision=bf17-mixed",
     "train.precision: unknown precision 'bf17-mixed' (did you mean 'bf16-mixed'?); choices: 16, 16-mixed, 16-true, "
     "32, 32-true, 64, 64-true, bf16, bf16-mixed, bf16-true, transformer-engine, transformer-engine-float16"),
    ("describe-probe-too-many-pairs", 'describe {ws}/exp.yaml task={{"name":"mqar","seq_len":30,"num_kv_pairs":8}}',
     "task.num_kv_pairs: 8 key-value pairs need 4 x 8 = 32 tokens (each pair, and a query slot of two), more than "
     "seq_len 30 holds"),
    ("describe-probe-longer-than-the-model", 'describe {ws}/exp.yaml task={{"name":"in_context_recall","seq_len":64}}',
     "task.seq_len: the examples (seq_len 64) need 64 tokens, more than the model's max_seq_len 32"),
    ("describe-unknown-exact-match-decoding", "describe {ws}/exp.yaml train.exact_match_decoding=fast",
     "train.exact_match_decoding: unknown decoding path 'fast'; choices: auto, compiled, eager"),
    ("describe-qk-norm-scope-without-qk-norm", "describe {ws}/exp.yaml model.qk_norm_scope=projection",
     "model.qk_norm_scope: refines model.qk_norm, which is not set"),
    ("describe-moe-aux-loss-layers", "describe {ws}/exp.yaml model.ffn=moe model.ffn.aux_loss_layers=pool",
     "model.ffn.aux_loss_layers: unknown way to combine layers' aux losses 'pool' (did you mean 'pooled'?)"),
    ("describe-vocab-size-zero", "describe {ws}/exp.yaml --vocab-size 0",
     "argument --vocab-size: expected a positive integer, got 0"),
    ("describe-seq-len-text", "describe {ws}/exp.yaml --seq-len long",
     "argument --seq-len: expected a positive integer, got 'long'"),
    ("describe-layer-shape-unfit-for-cross-rope", "describe {ws}/cross_rope.yaml",
     "model.layers[0].head_dim: cross-attention uses model.position at this layer's shape: RoPE needs an even"),
    ("train-malformed-yaml", "train {ws}/malformed.yaml --out {ws}/r", "config: cannot parse {ws}/malformed.yaml"),
    ("train-empty-config", "train {ws}/empty.yaml --out {ws}/r", "config: {ws}/empty.yaml is empty"),
    ("train-default-out-of-empty-config", "train {ws}/empty.yaml", "config: {ws}/empty.yaml is empty"),
    ("train-out-is-a-file", "train {ws}/exp.yaml --out {ws}/file.txt",
     "--out: {ws}/file.txt exists and is not a directory"),
    ("train-out-below-a-file", "train {ws}/exp.yaml --out {ws}/file.txt/run",
     "--out: {ws}/file.txt exists and is not a directory"),
    ("train-bad-override", "train {ws}/exp.yaml --out {ws}/r train.max_steps=-1",
     "train.max_steps: must be positive, got -1"),
    ("train-into-run-with-corrupt-config", "train {ws}/exp.yaml --out {ws}/bad_config",
     "cannot parse {ws}/bad_config/config.yaml"),
    ("gradnorms-out-is-a-file", "gradnorms {ws}/exp.yaml --depths 1 --seeds 0 --out {ws}/file.txt",
     "--out: {ws}/file.txt exists and is not a directory"),
    ("gradnorms-malformed-vary", "gradnorms {ws}/exp.yaml --vary model.norm_placement --out {ws}/g",
     "--vary: expected KEY=VALUE1,VALUE2"),
    ("gradnorms-unknown-vary-key", "gradnorms {ws}/exp.yaml --vary model.normm=a,b --depths 1 --seeds 0 --out {ws}/g",
     "model.normm: unknown key (did you mean 'norm'?)"),
    ("gradnorms-second-value-misspelt", "gradnorms {ws}/exp.yaml --vary model.norm_placement=pre,psot --depths 1 "
     "--seeds 0 --out {ws}/g", "model.norm_placement: unknown norm placement 'psot' (did you mean 'post'?)"),
    ("gradnorms-override-after-depths", "gradnorms {ws}/exp.yaml --depths 1 model.ffn=swiglu --out {ws}/g",
     "'model.ffn=swiglu' is an override: put key=value overrides before --depths"),
    ("gradnorms-zero-depth", "gradnorms {ws}/exp.yaml --depths 0 --out {ws}/g", "--depths: depths must be positive"),
    ("gradnorms-empty-config", "gradnorms {ws}/empty.yaml --depths 1 --out {ws}/g", "config: {ws}/empty.yaml is empty"),
    # plugins: named in the config (relative to it), on the command line (relative to the cwd)
    ("plugin-missing-file", "describe {ws}/plugins_missing.yaml", "plugins: {ws}/nope.py: file not found"),
    ("plugin-syntax-error", "train {ws}/plugins_syntax.yaml --out {ws}/r",
     "plugins: {ws}/plugin_syntax.py: cannot import (line 1): SyntaxError: "),
    ("plugin-raises-at-import", "describe {ws}/plugins_raises.yaml",
     "plugins: {ws}/plugin_raises.py: cannot import: RuntimeError: no GPU here"),
    ("plugin-registers-an-existing-name", "describe {ws}/plugins_dup.yaml",
     "plugins: {ws}/plugin_dup.py: position scheme 'rope' already exists (built in); register it under another name"),
    ("plugin-module-not-found", "train {ws}/plugins_module.yaml --out {ws}/r",
     "plugins: no_such_lab.blocks: cannot import: ModuleNotFoundError: No module named 'no_such_lab'"),
    ("plugin-not-a-list", "describe {ws}/plugins_notalist.yaml", "plugins: expected a list of module names or .py paths"),
    ("plugin-override-relative-to-cwd", "describe {ws}/exp.yaml plugins=[plugin_raises.py]",
     "plugins: {ws}/plugin_raises.py: cannot import: RuntimeError"),
    ("plugin-in-sweep-base", "sweep {ws}/spec_plugin.yaml --out {ws}/store",
     "plugin_raises.py: cannot import: RuntimeError: no GPU here"),
    ("plugin-components-flag", "components --plugin plugin_dup.py", "plugins: {ws}/plugin_dup.py: position scheme"),
    # sweep specs
    ("sweep-malformed-spec", "sweep {ws}/malformed.yaml --out {ws}/store",
     "sweep: cannot parse {ws}/malformed.yaml (line 3, column 1)"),
    ("sweep-empty-spec", "sweep {ws}/empty.yaml --out {ws}/store", "sweep: {ws}/empty.yaml is empty"),
    ("sweep-list-spec", "sweep {ws}/list.yaml --out {ws}/store", "sweep: {ws}/list.yaml must hold a mapping"),
    ("sweep-missing-spec", "sweep {ws}/nope.yaml --out {ws}/store", "sweep: file not found: {ws}/nope.yaml"),
    ("sweep-missing-base", "sweep {ws}/spec_missing_base.yaml --out {ws}/store", "base: file not found"),
    ("sweep-malformed-base", "sweep {ws}/spec_malformed_base.yaml --out {ws}/store",
     "cannot parse {ws}/malformed.yaml (line 3, column 1)"),
    ("sweep-unknown-grid-value", "sweep {ws}/spec_bad_value.yaml --out {ws}/store",
     "grid.model.position: unknown position scheme 'rop' (did you mean 'rope'?)"),
    ("sweep-unknown-key", "sweep {ws}/spec_unknown_key.yaml --out {ws}/store",
     "seed: unknown sweep key (did you mean 'seeds'?)"),
    ("sweep-tune-seeds-overlap", "sweep {ws}/spec_tune_overlap.yaml --out {ws}/store",
     "tune.seeds: seed 0 is also an evaluation seed"),
    ("sweep-tune-select-not-produced", "sweep {ws}/spec_tune_select.yaml --out {ws}/store",
     "tune.select: the task produces no val/exact_match"),
    ("sweep-tune-key-is-an-axis", "sweep {ws}/spec_tune_axis.yaml --out {ws}/store",
     "tune.key: model.position is also varied by grid"),
    # training recipes (issue 28): optimizers, schedules, parametrizations, the z-loss
    ("train-optimizer-option-it-does-not-take", "train {ws}/exp.yaml --out {ws}/r train.optimizer.momentum=0.9",
     "train.optimizer.momentum: unknown option for optimizer 'adamw'; options: eps"),
    ("train-mup-without-base-width", "train {ws}/exp.yaml --out {ws}/r model.parametrization=mup",
     "model.parametrization.base_width: mup needs base_width"),
    ("train-mup-base-width-above-d-model",
     'train {ws}/exp.yaml --out {ws}/r model.parametrization={{"name":"mup","base_width":64}}',
     "model.parametrization.base_width: is 64, above d_model (16)"),
    ("train-mup-with-sgd", 'train {ws}/exp.yaml --out {ws}/r model.parametrization={{"name":"mup","base_width":8}} '
     "train.optimizer=sgd", "train.optimizer: 'sgd' makes 'sgd' updates, for which parametrization 'mup' has no"),
    ("train-wsd-decay-fraction-above-one", 'train {ws}/exp.yaml --out {ws}/r train.schedule={{"name":"wsd","decay_fraction":1.5}}',
     "train.schedule.decay_fraction: must be in (0, 1], got 1.5"),
    ("train-wsds-decays-unsorted", 'train {ws}/exp.yaml --out {ws}/r train.schedule={{"name":"wsd","decays":[0.5,0.25,1.0]}}',
     "train.schedule.decays: must be in increasing order, got [0.5, 0.25, 1.0]"),
    ("train-wsds-decays-outside", 'train {ws}/exp.yaml --out {ws}/r train.schedule={{"name":"wsd","decays":[0.5,1.5]}}',
     "train.schedule.decays: fractions of max_steps in (0, 1], got [0.5, 1.5]"),
    ("train-wsd-decay-fraction-zero", "train {ws}/exp.yaml --out {ws}/r train.schedule=wsd train.schedule.decay_fraction=0",
     "train.schedule.decay_fraction: must be in (0, 1], got 0.0"),
    ("train-negative-z-loss", "train {ws}/exp.yaml --out {ws}/r train.z_loss=-1", "train.z_loss: must be >= 0"),
    ("sweep-unknown-optimizer-axis", "sweep {ws}/spec_bad_optimizer.yaml --out {ws}/store",
     "grid.train.optimizer: unknown optimizer 'muonn' (did you mean 'muon'?)"),
    ("sweep-tune-empty-range", "sweep {ws}/spec_tune_range.yaml --dry-run --out {ws}/store",
     "tune.values.n: the range is empty"),
    ("sweep-scale-size-outside-the-model", "sweep {ws}/spec_scale_key.yaml --dry-run --out {ws}/store",
     "scale.sizes[0].lr: is not a model key"),
    ("sweep-scale-sizes-not-increasing", "sweep {ws}/spec_scale_order.yaml --out {ws}/store",
     "scale.sizes[1]: gives position=rope 2,256 non-embedding parameters (3,808 in all), no more than the size "
     "before it (d32: 6,528)"),
    ("sweep-scale-two-budgets", "sweep {ws}/spec_scale_budget.yaml --out {ws}/store",
     "scale.budget: give tokens_per_param (a budget that grows with size) or flops"),
    ("sweep-suite-unknown-task", "sweep {ws}/spec_suite_task.yaml --out {ws}/store",
     "suite.tasks[1].task: unknown task 'copyy' (did you mean 'copy'?)"),
    ("sweep-suite-unknown-option", "sweep {ws}/spec_suite_option.yaml --out {ws}/store",
     "suite.tasks[1].options.n_symbolz: unknown option for task 'copy' (did you mean 'n_symbols'?)"),
    ("sweep-suite-option-the-task-rejects", "sweep {ws}/spec_suite_rejected.yaml --out {ws}/store",
     "suite.tasks[1]: max_len (4) must be >= min_len (9) (variant position=rope,task=copy)"),
    ("sweep-suite-unknown-shipped-suite", "sweep {ws}/spec_suite_shipped.yaml --dry-run --out {ws}/store",
     "suite: unknown suite 'madd' (did you mean 'mad'?)"),
    ("sweep-scale-warmup-without-a-budget", "sweep {ws}/spec_scale_warmup.yaml --dry-run --out {ws}/store",
     "scale.warmup_fraction: sets warmup from each rung's steps, which only a budget (tokens_per_param or flops) "
     "gives"),
    ("report-extrapolate-inside-the-ladder", "report {ws}/ladder --out {ws}/rep --extrapolate-to 1e3",
     "--extrapolate-to: 1e+03 FLOPs is not beyond the largest rung's training compute (6.4e+13)"),
    ("report-extrapolate-without-a-ladder", "report {ws}/sweep --out {ws}/rep --extrapolate-to 1e20",
     "--extrapolate-to: is for a ladder sweep"),
    ("sweep-out-is-a-file", "sweep {ws}/spec.yaml --out {ws}/file.txt", "--out: {ws}/file.txt exists and is not a"),
    ("sweep-dry-run-out-is-a-file", "sweep {ws}/spec.yaml --dry-run --out {ws}/file.txt", "--out: {ws}/file.txt"),
    ("sweep-zero-workers", "sweep {ws}/spec.yaml --workers 0 --out {ws}/store", "--workers: must be at least 1"),
    # scale-out settings (issue 18): strategies, devices, nodes, launchers
    ("train-unknown-strategy", "train {ws}/exp.yaml --out {ws}/r train.strategy=dpp",
     "train.strategy: unknown Lightning strategy 'dpp' (did you mean 'ddp'?)"),
    ("train-fsdp-on-cpu", "train {ws}/exp.yaml --out {ws}/r train.strategy=fsdp train.accelerator=cpu",
     "train.strategy: fsdp needs CUDA GPUs"),
    ("train-more-gpus-than-present", "train {ws}/exp.yaml --out {ws}/r train.accelerator=gpu train.devices=4096",
     "train.devices: 4096 GPUs asked for"),
    ("train-zero-nodes", "train {ws}/exp.yaml --out {ws}/r train.num_nodes=0", "train.num_nodes: must be at least 1"),
    ("sweep-unreachable-ray-address", "sweep {ws}/spec.yaml --out {ws}/store --launcher ray --ray-address 127.0.0.1:9",
     "--ray-address: no Ray cluster reachable at 127.0.0.1:9"),
    ("sweep-slurm-bad-time", "sweep {ws}/spec.yaml --out {ws}/store --launcher slurm --slurm-time soon",
     "--slurm-time: 'soon' is not a Slurm time"),
    ("sweep-slurm-bad-extra", "sweep {ws}/spec.yaml --out {ws}/store --launcher slurm --slurm-extra qos",
     "--slurm-extra: 'qos' is not KEY=VALUE"),
    ("train-resume-damaged-checkpoint", "train {ws}/exp.yaml --out {ws}/bad_resume --quiet",
     "--out: cannot resume from {ws}/bad_resume/checkpoints/last.ckpt"),
    # run dirs, checkpoints, tokenizer files and prompts (generate)
    ("generate-missing-run", "generate {ws}/nope --prompt a", "run: {ws}/nope is not a run directory or checkpoint"),
    ("generate-dir-not-a-run", "generate {ws}/a_dir --prompt a", "run: {ws}/a_dir is not a run directory"),
    ("generate-run-without-tokenizer", "generate {ws}/no_tokenizer --prompt a",
     "run: {ws}/no_tokenizer/tokenizer.json not found"),
    ("generate-corrupt-tokenizer", "generate {ws}/bad_tokenizer --prompt a",
     "run: cannot read {ws}/bad_tokenizer/tokenizer.json"),
    ("generate-corrupt-config", "generate {ws}/bad_config --prompt a", "cannot parse {ws}/bad_config/config.yaml"),
    ("generate-corrupt-checkpoint", "generate {ws}/bad_ckpt/checkpoints/last.ckpt --prompt a",
     "run: cannot load {ws}/bad_ckpt/checkpoints/last.ckpt"),
    ("generate-a-file-not-a-run", "generate {ws}/exp.yaml --prompt a",
     "run: {ws}/exp.yaml is a file but not a checkpoint (.ckpt)"),
    ("generate-empty-prompt", "generate {ws}/run --prompt=", "--prompt: is empty"),
    ("generate-unknown-strategy", "generate {ws}/run --prompt a --strategy nucleus --temperature 2",
     "--strategy: unknown strategy 'nucleus'"),
    ("generate-top-p-above-one", "generate {ws}/run --prompt a --strategy sample --top-p 1.5",
     "--top-p: must be in (0, 1]"),
    ("generate-zero-new-tokens", "generate {ws}/run --prompt a --max-new-tokens 0", "--max-new-tokens: must be >= 1"),
    ("generate-best-of-a-run-dir", "generate {ws}/run --best --prompt a",
     "--best: {ws}/run is a run directory, not a sweep (no sweep.yaml); --best picks the best run of a sweep"),
    ("generate-best-of-a-file", "generate {ws}/exp.yaml --best --prompt a", "--best: {ws}/exp.yaml is a file, not a"),
    ("generate-best-of-a-missing-path", "generate {ws}/nope --best --prompt a", "--best: {ws}/nope does not exist"),
    ("generate-best-no-completed-run", "generate {ws}/sweep_unfinished --best --prompt a",
     "--best: {ws}/sweep_unfinished has no completed run to choose from (1 failed, 1 interrupted)"),
    ("generate-best-no-checkpoint", "generate {ws}/sweep --best --prompt a",
     "--best: none of the 10 completed runs of {ws}/sweep has both val/loss (the sweep's metric) and a checkpoint"),
    ("generate-a-sweep-without-best", "generate {ws}/sweep --prompt a",
     "run: {ws}/sweep is a sweep, not a run: add --best (best=True) for its best run"),
    # lm_eval tasks and the runs they evaluate (eval)
    ("eval-unknown-task", "eval {ws}/run --tasks zoo_choise --include-path {ws}/tasks --no-builtin-tasks",
     "--tasks: unknown lm_eval task 'zoo_choise' (did you mean 'zoo_choice'?) under {ws}/tasks"),
    ("eval-task-data-missing", "eval {ws}/run --tasks zoo_missing --include-path {ws}/tasks --no-builtin-tasks",
     "--tasks: zoo_missing: cannot load the task's data"),
    ("eval-task-file-not-yaml", "eval {ws}/run --tasks zoo_broken --include-path {ws}/bad_tasks --no-builtin-tasks",
     "{ws}/bad_tasks/zoo_broken.yaml: is not valid YAML, so lm_eval skipped its tasks (while parsing a flow sequence"),
    # a run as a Hugging Face directory (export --to hf) and a Hugging Face directory as a run (import)
    ("export-hf-run-without-checkpoint", "export {ws}/a_dir --to hf --out {ws}/hf_out",
     "run: {ws}/a_dir has no checkpoint (checkpoints/last.ckpt): nothing to export"),
    ("export-hf-out-not-empty", "export {ws}/run --to hf --out {ws}/tasks",
     "--out: {ws}/tasks exists and is not empty; give --force to replace it"),
    ("export-hf-out-unwritable", "export {ws}/run --to hf --out /sys/hf_out",
     "--out: the output is written in /sys/hf_out, which cannot be created"),
    ("export-hf-encoder-as-causal-lm", "export {ws}/encoder_run --to hf --out {ws}/hf_out --auto-class "
     "AutoModelForCausalLM", "--auto-class: {ws}/encoder_run is a model of kind 'encoder', which cannot be loaded "
     "as AutoModelForCausalLM; it exports as AutoModelForMaskedLM"),
    ("export-hf-best-without-checkpoint", "export {ws}/sweep --best --to hf --out {ws}/hf_out",
     "--best: none of the 10 completed runs of {ws}/sweep has both val/loss (the sweep's metric) and a checkpoint"),
    ("export-hf-without-out", "export {ws}/run --to hf", "--out: --to hf needs --out DIR"),
    ("export-out-without-hf", "export {ws}/run --to tensorboard --out {ws}/hf_out", "--out: is for --to hf"),
    ("import-not-a-checkpoint-dir", "import {ws}/a_dir --out {ws}/imported",
     "{ws}/a_dir: not a Hugging Face checkpoint directory: it has no config.json"),
    ("import-out-not-empty", "import {ws}/a_dir --out {ws}/tasks",
     "--out: {ws}/tasks exists and is not empty; give --force to replace it"),
    ("eval-encoder-run", "eval {ws}/encoder_run --tasks zoo_choice --include-path {ws}/tasks",
     "run: {ws}/encoder_run is a model of kind 'encoder', which cannot score loglikelihoods"),
    ("eval-missing-run", "eval {ws}/nope --tasks zoo_choice", "run: {ws}/nope does not exist"),
    ("eval-sweep-without-completed-runs", "eval {ws}/sweep_unfinished --tasks zoo_choice",
     "run: {ws}/sweep_unfinished has no completed run to evaluate (1 failed, 1 interrupted)"),
    ("eval-include-path-not-a-dir", "eval {ws}/run --tasks zoo_choice --include-path {ws}/file.txt",
     "--include-path: {ws}/file.txt is not a directory of lm_eval task files"),
    ("eval-unknown-device", "eval {ws}/run --tasks zoo_choice --device gpu0", "--device: 'gpu0' is not a torch device"),
    ("eval-zero-limit", "eval {ws}/run --tasks zoo_choice --limit 0", "argument --limit: must be positive, got 0"),
    # report dirs and --out targets (report, compare)
    ("report-missing-dir", "report {ws}/nope --out {ws}/rep", "{ws}/nope does not exist"),
    ("report-not-a-sweep", "report {ws}/a_dir --out {ws}/rep", "{ws}/a_dir is not a sweep directory"),
    ("report-out-is-a-file", "report {ws}/sweep --out {ws}/file.txt", "--out: {ws}/file.txt exists and is not a"),
    ("report-out-unwritable", "report {ws}/sweep --out /sys/rep", "--out: the report is written in /sys/rep, which "
     "cannot be created"),
    ("compare-out-unwritable", "compare {ws}/sweep --out /sys/rep", "--out: the report is written in /sys/rep"),
    ("report-unknown-format", "report {ws}/sweep --out {ws}/rep --format md,pdf", "format: unknown format 'pdf'"),
    ("report-unknown-metric", "report {ws}/sweep --out {ws}/rep --metric val/lss",
     "metric: 'val/lss' was logged by no run (did you mean 'val/loss'?)"),
    ("report-baseline-not-key-value", "report {ws}/sweep --out {ws}/rep --baseline rope",
     "baseline: 'rope' is not KEY=VALUE"),
    ("compare-missing-path", "compare {ws}/sweep {ws}/nope", "{ws}/nope does not exist"),
    ("compare-out-is-a-file", "compare {ws}/sweep --out {ws}/file.txt", "--out: {ws}/file.txt exists and is not a"),
    ("compare-unknown-metric", "compare {ws}/sweep --out {ws}/rep --metric nope",
     "metric: 'nope' was logged by no run"),
    ("report-baseline-null-spelt-None", "report {ws}/nulls --out {ws}/rep --baseline model.qk_norm=None",
     "baseline: model.qk_norm=None matches no variant (null is spelled null, as in YAML: model.qk_norm=null)"),
    ("compare-baseline-null-spelt-None", "compare {ws}/nulls --out {ws}/rep --baseline qk_norm=None",
     "baseline: model.qk_norm=None matches no variant (null is spelled null"),
    # dashboards: export targets, tools, tracking URIs (nothing listens on port 9, discard), --watch
    ("export-missing-dir", "export {ws}/nope --to tensorboard", "{ws}/nope does not exist"),
    ("export-not-a-run-or-sweep", "export {ws}/a_dir --to tensorboard", "{ws}/a_dir is not a sweep directory"),
    ("export-unknown-tool", "export {ws}/sweep --to grafana", "--to: unknown dashboard 'grafana'; choices: mlflow,"),
    ("export-unreachable-tracking-uri", "export {ws}/sweep --to mlflow --tracking-uri http://127.0.0.1:9",
     "--tracking-uri: cannot reach the MLflow tracking server at http://127.0.0.1:9"),
    ("export-tracking-uri-bad-scheme", "export {ws}/sweep --to mlflow --tracking-uri htp://127.0.0.1:5000",
     "--tracking-uri: 'htp://127.0.0.1:5000' is not an MLflow tracking URI; expected a server URL (http://HOST:PORT)"),
    ("export-tracking-uri-host-port", "export {ws}/sweep --to mlflow --tracking-uri localhost:5000",
     "--tracking-uri: 'localhost:5000' is not an MLflow tracking URI"),
    ("export-mlflow-store-unwritable", "export {ws}/sweep --to mlflow --tracking-uri sqlite:////sys/mlflow.db",
     "--tracking-uri: mlflow writes its database mlflow.db in /sys, which cannot be written"),
    ("export-mlflow-store-dir-missing", "export {ws}/sweep --to mlflow --tracking-uri sqlite:///{ws}/nope/mlflow.db",
     "--tracking-uri: mlflow writes its database {ws}/nope/mlflow.db, but directory {ws}/nope does not exist"),
    ("export-tensorboard-dir-uncreatable", "export {ws}/tb_blocked --to tensorboard",
     "--to: tensorboard writes its logs in {ws}/tb_blocked/tensorboard, but {ws}/tb_blocked/tensorboard is a file"),
    ("export-second-tool-unwritable", "export {ws}/tb_blocked --to mlflow --to tensorboard",
     "--to: tensorboard writes its logs in {ws}/tb_blocked/tensorboard"),  # and no mlflow.db is left behind
    ("export-second-tool-unknown", "export {ws}/sweep --to tensorboard --to grafana", "--to: unknown dashboard 'grafana'"),
    ("train-tracking-uri-no-scheme", "train {ws}/exp.yaml --out {ws}/r logging.mlflow.enabled=true "
     "logging.mlflow.tracking_uri=127.0.0.1:5000", "logging.mlflow.tracking_uri: '127.0.0.1:5000' is not an MLflow"),
    ("sweep-option-of-another-launcher", "sweep {ws}/spec.yaml --out {ws}/store --slurm-partition gpu",
     "--slurm-partition: is for --launcher slurm; this sweep runs with --launcher local"),
    ("sweep-ray-address-with-slurm", "sweep {ws}/spec.yaml --out {ws}/store --launcher slurm --ray-address 1.2.3.4:5",
     "--ray-address: is for --launcher ray; this sweep runs with --launcher slurm"),
    ("export-tracking-uri-without-mlflow", "export {ws}/sweep --to tensorboard --tracking-uri http://127.0.0.1:9",
     "--tracking-uri: is for --to mlflow; --to tensorboard writes next to the runs"),
    ("train-unreachable-tracking-uri", "train {ws}/exp.yaml --out {ws}/r logging.mlflow.enabled=true "
     "logging.mlflow.tracking_uri=http://127.0.0.1:9", "logging.mlflow.tracking_uri: cannot reach the MLflow"),
    ("sweep-unreachable-tracking-uri", "sweep {ws}/spec.yaml logging.mlflow.enabled=true "
     "logging.mlflow.tracking_uri=http://127.0.0.1:9 --out {ws}/store",
     "logging.mlflow.tracking_uri: cannot reach the MLflow"),
    ("dashboard-not-a-sweep", "dashboard {ws}/a_dir", "{ws}/a_dir is not a sweep directory"),
    ("dashboard-unknown-tool", "dashboard {ws}/sweep --tool grafana", "--tool: unknown dashboard 'grafana'"),
    ("report-watch-zero-interval", "report {ws}/sweep --out {ws}/rep --watch --interval 0",
     "--interval: must be positive seconds, got 0.0"),
    # the command line itself
    ("unknown-command", "fly", "argument command: invalid choice: 'fly'"),
    ("unknown-option", "describe {ws}/exp.yaml --colour", "unrecognized arguments: --colour"),
]


def tree(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.is_dir(), p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def check_one_line(code: int, err: str, expected: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("arch-zoo: error: "), err
    assert expected in err, err


@pytest.mark.parametrize("argv,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_user_mistake_exits_2_with_one_line_and_leaves_nothing(argv, expected, ws, capsys, monkeypatch):
    """README: "A user mistake prints one line and exits 2"; nothing is written before the check."""
    monkeypatch.chdir(ws)  # default outputs (runs/, reports/) would land in the workspace too
    before = tree(ws)
    capsys.readouterr()
    code = main([a.format(ws=ws) for a in argv.split(" ")])
    check_one_line(code, capsys.readouterr().err, expected.format(ws=ws))
    assert tree(ws) == before


REAL_PROCESS = ["describe-malformed-yaml", "train-out-is-a-file", "sweep-malformed-spec", "plugin-raises-at-import"]


@pytest.mark.parametrize("case", REAL_PROCESS)
def test_the_console_script_reports_a_mistake_in_one_line(case, ws):
    """The same contract through the installed `arch-zoo` script in a fresh process: the exit code
    and stderr a shell sees, with no traceback from an exception escaping ``main``."""
    argv, expected = next(c[1:] for c in CASES if c[0] == case)
    exe = Path(sys.executable).with_name("arch-zoo")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "arch_zoo"]
    before = tree(ws)
    proc = subprocess.run(cmd + [a.format(ws=ws) for a in argv.split(" ")], capture_output=True, text=True,
                          cwd=ws, timeout=300)
    check_one_line(proc.returncode, proc.stderr, expected.format(ws=ws))
    assert proc.stdout == ""
    assert tree(ws) == before


def test_a_dashboard_port_in_use_exits_2_with_one_line(ws, capsys, monkeypatch):
    """README (Dashboards): `--port N` that another process holds is a one-line error, before any export."""
    import socket

    monkeypatch.chdir(ws)
    before = tree(ws)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        capsys.readouterr()
        code = main(["dashboard", str(ws / "sweep"), "--port", str(port)])
    check_one_line(code, capsys.readouterr().err, f"--port: port {port} on 127.0.0.1 is in use")
    assert tree(ws) == before


def test_generate_compile_without_a_compiler_exits_2_with_one_line(ws, capsys, monkeypatch):
    """`generate --compile` where inductor has no C++ compiler: one line naming the flag, before decoding."""
    monkeypatch.chdir(ws)
    monkeypatch.setenv("CXX", "no-such-cxx")
    before = tree(ws)
    capsys.readouterr()
    code = main(["generate", str(ws / "run"), "--prompt", "a", "--compile"])
    check_one_line(code, capsys.readouterr().err, "--compile: torch.compile on CPU needs a C++ compiler; "
                   "'no-such-cxx' is not on PATH")
    assert tree(ws) == before


@pytest.mark.parametrize("form", ["{ws}/mlruns", "file://{ws}/mlruns"])
def test_an_mlflow_file_store_without_mlflows_opt_in_exits_2_with_one_line(form, ws, capsys, monkeypatch):
    """A directory or file: URI is MLflow's file store, which MLflow 3 opens only under
    MLFLOW_ALLOW_FILE_STORE=true: without it, one line naming the variable and a database to use."""
    monkeypatch.chdir(ws)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    before = tree(ws)
    capsys.readouterr()
    code = main(["export", str(ws / "sweep"), "--to", "mlflow", "--tracking-uri", form.format(ws=ws)])
    check_one_line(code, capsys.readouterr().err, "is a file store, which this MLflow refuses unless "
                                                  f"MLFLOW_ALLOW_FILE_STORE=true is set; or use a database, e.g. "
                                                  f"sqlite:///{ws}/mlruns.db")
    assert tree(ws) == before


# Runs the CLI with one module made unimportable, as on a machine without that extra installed.
BLOCKED = """
import sys
class Missing:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r} or name.startswith({module!r} + "."):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Missing())
sys.argv = ["arch-zoo", *{argv!r}]
from arch_zoo.cli import run
run()
"""


@pytest.mark.parametrize("module, argv, expected", [
    ("mlflow", "export {ws}/sweep --to mlflow",
     "--to: mlflow is not installed; install it with: pip install 'arch-zoo[mlflow]'"),
    ("tensorboard", "export {ws}/sweep --to tensorboard",
     "--to: tensorboard is not installed; install it with: pip install 'arch-zoo[tensorboard]'"),
    ("mlflow", "train {ws}/exp.yaml --out {ws}/r logging.mlflow.enabled=true",
     "logging.mlflow: mlflow is not installed; install it with: pip install 'arch-zoo[mlflow]'"),
    # `dashboard` chooses its tool with --tool; it has no --to
    ("tensorboard", "dashboard {ws}/sweep",
     "--tool: tensorboard is not installed; install it with: pip install 'arch-zoo[tensorboard]'"),
    ("mlflow", "dashboard {ws}/sweep --tool mlflow",
     "--tool: mlflow is not installed; install it with: pip install 'arch-zoo[mlflow]'"),
], ids=["export-mlflow", "export-tensorboard", "train-mlflow-logger", "dashboard-tensorboard", "dashboard-mlflow"])
def test_a_missing_optional_dependency_names_the_extra_to_install(module, argv, expected, ws):
    """README (Dashboards): without the extra, the command says `pip install 'arch-zoo[mlflow]'` in one line."""
    before = tree(ws)
    code = BLOCKED.format(module=module, argv=[a.format(ws=ws) for a in argv.split(" ")])
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ws, timeout=300)
    check_one_line(proc.returncode, proc.stderr, expected.format(ws=ws))
    assert tree(ws) == before


# ------------------------------------------------------------------ corpora and the token store (issue 15)

@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """Bad corpora and tokenizer files beside one good config; the token cache is this module's own."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer, models

    ws = tmp_path_factory.mktemp("corpora")
    (ws / "exp.yaml").write_text(yaml.safe_dump(EXPERIMENT))
    (ws / "latin1.txt").write_bytes("hello caf\xe9 world\n".encode("latin-1"))
    (ws / "empty.txt").write_text("")
    (ws / "good.txt").write_text("The quick brown fox jumps over the lazy dog.\n" * 2000)
    (ws / "docs.jsonl").write_text(json.dumps({"body": "a document"}) + "\n")
    pq.write_table(pa.table({"body": ["a document"]}), ws / "docs.parquet")
    (ws / "prompts.jsonl").write_text(json.dumps({"prompt": "2+2=", "answer": "4"}) + "\n")
    (ws / "not_a_tokenizer.json").write_text(json.dumps({"vocab": ["a", "b"]}))
    big = Tokenizer(models.WordLevel({f"w{i}": i for i in range(70_000)} | {"</s>": 70_000}, unk_token="w0"))
    big.save(str(ws / "big_vocab.json"))
    return ws


PREPARE_CASES = [
    ("non-utf8-file", "prepare {ws}/exp.yaml task.files=[{ws}/latin1.txt]",
     "task.files[0]: {ws}/latin1.txt is not UTF-8 text (invalid continuation byte at byte 9)"),
    ("empty-corpus", "prepare {ws}/exp.yaml task.files=[{ws}/empty.txt]", "task.files: the corpus is empty"),
    ("missing-text-field", "prepare {ws}/exp.yaml task.files=[{ws}/docs.jsonl]",
     "task.text_field: 'text' is not a field of {ws}/docs.jsonl (line 1)"),
    ("parquet-without-the-column", "prepare {ws}/exp.yaml task.files=[{ws}/docs.parquet]",
     "task.text_field: 'text' is not a column of {ws}/docs.parquet; columns: body"),
    ("tokenizer-file-not-a-tokenizer",
     'prepare {ws}/exp.yaml task.files=[{ws}/good.txt] task.tokenizer={{"name":"pretrained","path":"{ws}/not_a_tokenizer.json"}}',
     "task.tokenizer.path: {ws}/not_a_tokenizer.json is not a Hugging Face tokenizer file"),
    ("vocabulary-too-big-for-uint16",
     "prepare {ws}/exp.yaml task.files=[{ws}/good.txt] task.dtype=uint16 "
     'task.tokenizer={{"name":"pretrained","path":"{ws}/big_vocab.json"}}',
     "task.dtype: uint16 holds ids below 65536, but the pretrained tokenizer has 70001 tokens; use uint32 or auto"),
    ("train-non-utf8-file", "train {ws}/exp.yaml --out {ws}/run task.files=[{ws}/latin1.txt]",
     "task.files[0]: {ws}/latin1.txt is not UTF-8 text"),
    ("max-chars-not-a-count", "prepare {ws}/exp.yaml task.max_chars=lots",
     "task.max_chars: expected a number of characters, null (all) or auto"),
    # issue 30: windows that start at documents, prompt-completion records
    ("windows-documents-without-document-splits", "prepare {ws}/exp.yaml task.windows=documents",
     "task.windows: documents needs split_by: documents"),
    ("windows-documents-on-a-non-corpus-task", "prepare {ws}/exp.yaml task.name=copy task.windows=documents",
     "task.windows: unknown option"),
    ("scored-completion-without-a-prompt-field",
     "prepare {ws}/exp.yaml task.files=[{ws}/docs.jsonl] task.split_by=documents task.scored=completion",
     "task.prompt_field: 'prompt' is not a field of {ws}/docs.jsonl (line 1)"),
    ("scored-completion-without-a-completion-field",
     "prepare {ws}/exp.yaml task.files=[{ws}/prompts.jsonl] task.split_by=documents task.scored=completion",
     "task.completion_field: 'completion' is not a field of {ws}/prompts.jsonl (line 1)"),
    ("scored-completion-of-plain-text",
     "prepare {ws}/exp.yaml task.files=[{ws}/good.txt] task.split_by=documents task.scored=completion",
     "task.files[0]: {ws}/good.txt is plain text; scored: completion reads records"),
    # issue 58 §4: documents kept apart need a task whose data has document boundaries
    ("documents-separate-on-a-synthetic-task", "train {ws}/exp.yaml --out {ws}/run task.name=mqar "
     "task.documents=separate", "task.documents: task 'mqar' has no such option: its examples have no document "
     "boundaries to keep apart; documents (choices: joined, separate) is an option of the corpus tasks char_lm and mlm"),
    ("documents-separate-on-a-classifier-task", "train {ws}/exp.yaml --out {ws}/run task.name=dyck task.documents=separate",
     "task.documents: task 'dyck' has no such option: its examples have no document boundaries to keep apart; "
     "documents (choices: joined, separate)"),
    ("documents-separate-without-document-splits", "train {ws}/exp.yaml --out {ws}/run task.documents=separate",
     "task.documents: separate needs split_by: documents (only a store split by documents records where each "
     "document starts); choices: joined, separate"),
    ("documents-unknown-choice", "prepare {ws}/exp.yaml task.split_by=documents task.documents=apart",
     "task.documents: unknown choice 'apart'; choices: joined, separate"),
    # issue 26 §2: prepare FILE... without a config names the flag or the file at fault
    ("files-missing", "prepare {ws}/nope.txt", "files[0]: file not found: {ws}/nope.txt"),
    ("files-non-utf8", "prepare {ws}/good.txt {ws}/latin1.txt", "files[1]: {ws}/latin1.txt is not UTF-8 text"),
    ("files-empty", "prepare {ws}/empty.txt", "files: the corpus is empty"),
    ("files-missing-text-field", "prepare {ws}/docs.jsonl", "--text-field: 'text' is not a field of {ws}/docs.jsonl"),
    ("files-bpe-without-a-size", "prepare {ws}/good.txt --tokenizer bpe:many",
     "--tokenizer: expected bpe:N, N the vocabulary size (e.g. bpe:8192), got 'bpe:many'"),
    ("files-bpe-too-small", "prepare {ws}/good.txt --tokenizer bpe:100", "--tokenizer: vocab_size must exceed 262"),
    ("files-unknown-tokenizer", "prepare {ws}/good.txt --tokenizer sentencepiece",
     "--tokenizer: 'sentencepiece' is neither a tokenizer nor a tokenizer file; choices: bpe:N, byte, char, "
     "PATH (a tokenizer.json)"),
    ("files-tokenizer-not-for-text", "prepare {ws}/good.txt --tokenizer word", "--tokenizer: 'word' does not fit"),
    ("files-size-for-a-sizeless-tokenizer", "prepare {ws}/good.txt --tokenizer char:10",
     "--tokenizer: 'char' takes no vocabulary size"),
    ("files-tokenizer-file-not-a-tokenizer", "prepare {ws}/good.txt --tokenizer {ws}/not_a_tokenizer.json",
     "--tokenizer: {ws}/not_a_tokenizer.json is not a Hugging Face tokenizer file"),
    ("files-max-chars-zero", "prepare {ws}/good.txt --max-chars 0",
     "--max-chars: expected a positive number of characters, all or auto, got '0'"),
    ("files-unknown-split", "prepare {ws}/good.txt --split-by words", "--split-by: unknown split 'words'"),
    ("files-with-an-override", "prepare {ws}/good.txt task.max_chars=5",
     "task.max_chars: key=value overrides need an experiment config"),
    ("cache-clean-unknown-key", "cache clean 0123", "KEY: no store '0123' in the token cache"),
    ("cache-unknown-action", "cache purge", "argument action: invalid choice: 'purge'"),
]


def _cache_dirs(cache: Path) -> list:
    return sorted(p.name for p in cache.iterdir() if p.is_dir()) if cache.exists() else []


@pytest.mark.parametrize("argv,expected", [c[1:] for c in PREPARE_CASES], ids=[c[0] for c in PREPARE_CASES])
def test_a_bad_corpus_exits_2_with_one_line_and_leaves_no_store(argv, expected, corpora, capsys, monkeypatch):
    """README: "A user mistake prints one line and exits 2"; issue 15 §5: bad corpora and tokenizer files
    leave no partial token store (nor a temporary one) in the cache."""
    cache = corpora / "cache"
    monkeypatch.setenv("ARCH_ZOO_CACHE", str(cache))
    monkeypatch.chdir(corpora)
    before, dirs = tree(corpora), _cache_dirs(cache)
    capsys.readouterr()
    code = main([a.format(ws=corpora) for a in argv.split(" ")])
    check_one_line(code, capsys.readouterr().err, expected.format(ws=corpora))
    assert _cache_dirs(cache) == dirs
    assert not list(cache.glob("*.lock"))  # issue 26 §2: a failed prepare left a 0-byte lock file
    assert {k: v for k, v in tree(corpora).items() if not k.startswith("cache")} == \
        {k: v for k, v in before.items() if not k.startswith("cache")}


FULL_DISK = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG, as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (50_000, 50_000))
from arch_zoo.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_full_disk_during_prepare_exits_2_and_cleans_up(corpora, tmp_path):
    """Issue 15 §5: a full disk during prepare gives one line and exit 2 and leaves no partial store
    (a real write error: the process's file size limit, RLIMIT_FSIZE, stops the shard at 50 kB)."""
    cache = tmp_path / "cache"
    env = {**__import__("os").environ, "ARCH_ZOO_CACHE": str(cache)}
    proc = subprocess.run([sys.executable, "-c", FULL_DISK, "prepare", str(corpora / "exp.yaml"), "--quiet",
                           f"task.files=[{corpora}/good.txt]", "task.max_chars=null"], capture_output=True, text=True, env=env, timeout=300)
    check_one_line(proc.returncode, proc.stderr, f"task: cannot write the token store in {cache}: File too large")
    assert _cache_dirs(cache) == []
