# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# The CPU build of torch; a bare `torch` requirement would pull a multi-GB CUDA build.
# On a GPU machine: make TORCH_SPEC=torch test
TORCH_SPEC ?= torch==2.13.0
export WANDB_MODE ?= offline
STUDIES := positions norm_placement heads ffn copy heads_tuned norm_placement_tuned heads_tuned_halving scan mup_transfer ladder probes recurrence recurrence_recall mixers_mqar hybrid_ratio hybrid_ratio_rope hybrid_ratio_mqar attention_variants attention_sinks mup_transfer_mlm tokenizers tokenizers_flops ladder_transfer attention_variants_adaptive ladder_wsds recall_vs_state hybrid_layouts hybrid_layouts_mqar

.PHONY: install test test-cpus test-order test-slow demo docs bench studies $(addprefix study-,$(STUDIES)) study-documents gradnorms clean

$(VENV)/.installed: pyproject.toml Makefile
	@echo "make: installing arch_zoo, torch and its extras into $(VENV): about 7 minutes on a fresh machine, once"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e '.[test,bench,ray,docs,eval]'
	touch $@

install: $(VENV)/.installed

# The suite in parallel, a test file per worker process (pytest-xdist; its module fixtures are built
# once): one worker a logical CPU, at most 8 (each test uses one torch thread, tests/conftest.py);
# TEST_WORKERS=0 runs the suite in the pytest process itself.
TEST_WORKERS ?= logical
PYTEST_SUITE = $(PY) -m pytest -q -m "not slow" -n $(TEST_WORKERS) --maxprocesses 8 --dist loadfile
test: $(VENV)/.installed
	$(PYTEST_SUITE)

# The tests that assert what training learns, again under the CPU kernels other machines use (torch
# picks AVX-512 where the CPU has it, else AVX2; `default` is the plain path) and with 2 threads: a margin
# that holds only on one machine's float path fails here, not on a user's machine. The compiled-training
# tests run too: inductor writes code for the capability, cached apart from the native run's.
test-cpus: $(VENV)/.installed
	ATEN_CPU_CAPABILITY=avx2 ARCH_ZOO_TEST_THREADS=2 $(PY) -m pytest -q -m "(outcome or compiles) and not slow"
	ATEN_CPU_CAPABILITY=default $(PY) -m pytest -q -m "(outcome or compiles) and not slow"

# The suite as CI runs it, three more times: each under another shift of every test's seed
# (ARCH_ZOO_TEST_SEED, tests/conftest.py), the first with its test files in reverse order, the second
# shuffled, the third under AVX2 kernels. A test that passes only for one draw of its random inputs,
# or only after (or before) some other file ran in its worker, fails here. ~40 min on 2 cores.
test-order: $(VENV)/.installed
	ARCH_ZOO_TEST_SEED=1 $(PYTEST_SUITE) --file-order reversed
	ARCH_ZOO_TEST_SEED=2 $(PYTEST_SUITE) --file-order shuffled:2
	ARCH_ZOO_TEST_SEED=3 ATEN_CPU_CAPABILITY=avx2 $(PYTEST_SUITE) --file-order shuffled:3

test-slow: $(VENV)/.installed
	$(PY) -m pytest -q -m slow

# The quickstart sweep (3 position schemes x 2 seeds on a char-LM), then its report (--quiet: the
# sweep has just printed the table and its notes; said twice they read as two problems).
# Rerunning resumes: finished runs are kept.
demo: $(VENV)/.installed
	$(VENV)/bin/arch-zoo sweep sweeps/quickstart.yaml --workers 2 --out runs/sweeps
	$(VENV)/bin/arch-zoo report runs/sweeps/quickstart --out reports/quickstart --quiet

# The documentation site (docs/, mkdocs.yml): built as the suite builds it (no broken link or
# reference), then served at http://127.0.0.1:8000/ until Ctrl-C.
docs: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs serve

# The published-findings studies (sweeps/studies/; about an hour on 2 CPU cores plus ~22 min for scan, not run in CI; the two
# *_tuned ones rerun heads and norm_placement with per-variant learning-rate tuning, issue 16, and
# heads_tuned_halving reruns heads_tuned with successive halving of its tuning stage, ~4 min; ladder, issue 29,
# a 3-rung size ladder of 18 runs, ~20 min on idle cores by its dry run (94.9 min measured on shared cores);
# probes, issue 30, 12 MQAR runs, 17 min with 2 workers on idle cores). Issue 39's and later studies were timed
# as they ran (each line below).
# Each trains into runs/studies/<study> (rerunning resumes) and writes reports/<study>/.
# A sweep's exit status 1 means some runs failed or diverged: that is data, the report still runs.
studies: $(addprefix study-,$(STUDIES)) study-documents gradnorms

# study-mup_transfer: 72 runs at widths 32-256 (issue 28), ~7,000 CPU-s estimated from measured step costs
# (two thirds at width 256), so about an hour on 2 idle cores; 150 min measured in pieces on shared cores.
# study-scan: 12 runs of 1800 steps, 2,615 CPU-s measured (250-290 a simple-split run, 161-183 a length-split
# one), so ~22 min on 2 idle cores; 23.4 min here, where two of the runs shared the cores with other tests.
# study-recurrence: 28 runs (issue 39: attention with sinusoidal positions or RoPE, LSTM, GRU at matched parameters on
# the char LM, lr tuned per mixer), 19.9 min measured with 2 workers on the 2-core machine (in two parts: 15.5 + 4.4).
# study-recurrence_recall: 24 runs (issue 39: MQAR recall at lengths 24-96, attention against an LSTM, lr tuned per
# cell), 32.0 min measured with 2 workers on the 2-core machine.
# study-mixers_mqar: 60 runs (issue 39: MQAR accuracy against width 16-64 for four mixers, lr tuned per cell), 35.3 min
# measured with 2 workers on the 2-core machine.
# study-hybrid_ratio: 24 runs (issue 39: 0, 1 in 4, 1 in 2, all layers attention among Gated DeltaNet, char LM, lr
# tuned per layout), 29.4 min measured with 2 workers on the 2-core machine. study-hybrid_ratio_rope: 18 runs (the
# layouts with attention again, RoPE in the attention layers), 19.3 min measured the same way.
# study-hybrid_ratio_mqar: 8 runs (the same four layouts on 4-layer MQAR, 2,500 steps, 2 seeds), 11.8 min measured
# with 2 workers on the 2-core machine.
# study-attention_variants: 30 runs (issue 40: MHA, GQA, MQA, MLA, differential at matched parameters, lr tuned per
# variant), 18.7 min measured with 2 workers on the 2-core machine (~24 by the dry run's probe, scaled).
# study-attention_sinks: 24 runs (issue 40: plain, sink logit, sigmoid output gate at lr 3e-3 to 1e-1, attention
# diagnostics on), 14.4 min measured with 2 workers on the 2-core machine (~17 by the probe, scaled).
# study-mup_transfer_mlm: 64 runs (issue 42: mup_transfer on an MLM encoder, widths 32-192, 3 seeds), 30.8 min measured
# with 2 workers on the 2-core machine (~40 by the dry run's probe, scaled).
# study-tokenizers / study-tokenizers_flops: 28 runs each (issue 46: char and BPE 512, 2k, 8k at matched bytes / matched
# training FLOPs, lr tuned per tokenizer), 44 and 37 min measured with 2 workers on the 2-core machine shared with
# other jobs. study-ladder_transfer: 36 runs (issue 42: ladder.yaml's recipes at widths 32-80 under µP with the lr
# tuned at width 32 and transferred, the largest rung held out), 54.8 min measured with 2 workers on the 2-core machine.
# study-attention_variants_adaptive: 15 tuning runs, then 15 to 40 (issue 56: attention_variants under seeds
# {start: 3, max: 8}; the committed design trained 36), 2.5 h of training, about 100 min with 2 workers on the 2-core
# machine shared with other jobs. study-ladder_wsds: 12 runs with 2 decay branches each (issue 56: ladder.yaml's
# recipes on a WSD-S ladder, 2 seeds), 73 min with 2 workers on the 2-core machine shared with other jobs.
# study-recall_vs_state: 39 runs (issue 58: MQAR accuracy against decoding-state bytes, 13 mixer families at widths
# 16-64, 4,000 steps, 1 seed; the frontier), timed in its report's provenance (2 workers at nice 10 on the 2-core
# machine shared with other jobs). study-hybrid_layouts / study-hybrid_layouts_mqar: 18 and 9 runs (issue 58: a
# 1-in-4 Gated DeltaNet hybrid with global or sliding-window attention against a parallel, Falcon-H1-style
# hybrid, on the char LM with each layout's lr tuned and on MQAR), timed in their reports' provenance.
$(addprefix study-,$(STUDIES)): study-%: $(VENV)/.installed
	$(VENV)/bin/arch-zoo sweep sweeps/studies/$*.yaml --workers 2 --out runs/studies; rc=$$?; [ $$rc -le 1 ] || exit $$rc
	$(VENV)/bin/arch-zoo report runs/studies/$* --out reports/$*

# study-documents: 12 + 6 runs (issue 58: attention against Gated DeltaNet with packed documents joined or separate,
# on the standard library's short docstrings shipped as sweeps/studies/documents_corpus.jsonl; then attention with
# RoPE, documents_rope.yaml), 38.9 + 18.5 min measured with 2 workers each on the 2-core machine shared with other
# jobs (the second sweep ran beside the first's last half). Four reports: against attention with documents joined
# (reports/documents), with documents separate (reports/documents_separate: each setting's verdict has its own
# paired intervals), both settings and the change between them (reports/documents_within), and the RoPE arm.
study-documents: $(VENV)/.installed
	$(VENV)/bin/arch-zoo sweep sweeps/studies/documents.yaml --workers 2 --out runs/studies; rc=$$?; [ $$rc -le 1 ] || exit $$rc
	$(VENV)/bin/arch-zoo sweep sweeps/studies/documents_rope.yaml --workers 2 --out runs/studies; rc=$$?; [ $$rc -le 1 ] || exit $$rc
	$(VENV)/bin/arch-zoo report runs/studies/documents --out reports/documents
	$(VENV)/bin/arch-zoo report runs/studies/documents --out reports/documents_separate \
		--baseline model.layers=null task.documents=separate
	$(VENV)/bin/arch-zoo report runs/studies/documents --out reports/documents_within --within task.documents
	$(VENV)/bin/arch-zoo report runs/studies/documents_rope --out reports/documents_rope

# Gradient norms at initialisation for the norm-placement study (Xiong et al. 2020, Fig. 3).
gradnorms: $(VENV)/.installed
	$(VENV)/bin/arch-zoo gradnorms configs/experiments/studies_char_lm.yaml --depths 2 4 6 8 10 12 \
		--vary model.norm_placement=post,pre --seeds 0 1 2 --out reports/norm_placement/gradnorms

bench: $(VENV)/.installed
	$(PY) benchmarks/train_step.py

clean:
	rm -rf $(VENV) build site *.egg-info .pytest_cache
