"""The typed experiment schema: plain dataclasses, nothing else.

A leaf module: it imports only ``coerce`` (the value types), so every layer (components, models,
training) can name the schema without pulling the others; a component field names its registry
family as a string. Parsing against the registries lives in ``parse``, checks in ``validation``,
reading YAML in ``loading``, per-layer resolution in ``layers``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal, Mapping, Optional, Tuple

from ..coerce import ComponentSpec, component_field, derived_field


def component(family: str, default: Optional[str]):
    """A config field naming a registered component (bare name or {name: ..., **options});
    a ``None`` default makes the component optional."""
    return component_field(family, ComponentSpec(default) if default else None)


@dataclass(frozen=True)
class ModelConfig:
    kind: Literal["encoder", "decoder", "encoder_decoder"] = "decoder"  # the stacks: encoder only, decoder only, or both
    vocab_size: Optional[int] = None  # null: taken from the task's tokenizer; more rows than its tokens (an imported checkpoint's padding) are kept, never targets
    d_model: int = 256  # width of the residual stream
    n_layers: int = 4  # layers per stack
    n_encoder_layers: Optional[int] = None  # default: n_layers
    n_decoder_layers: Optional[int] = None  # default: n_layers
    n_heads: int = 4  # attention (query) heads
    n_kv_heads: Optional[int] = None  # default: n_heads (MHA); 1 is MQA; in between is GQA
    head_dim: Optional[int] = None  # default: d_model // n_heads
    d_ff: Optional[int] = None  # default: 4 * d_model; gated FFNs 8/3 * d_model, up to a multiple of 8
    max_seq_len: int = 512  # longest sequence the model takes (a learned position table's size)
    position: ComponentSpec = component("positions", "sinusoidal")  # added to embeddings, rotating q/k or biasing scores
    cross_attention_position: bool = False  # also apply the scheme's rotate/bias in cross-attention
    norm: ComponentSpec = component("norms", "layernorm")  # the norm of every placement slot (and of embedding_norm)
    norm_placement: ComponentSpec = component("placements", "pre")  # pre, post, sandwich, deepnorm, parallel
    final_norm: Optional[bool] = None  # norm after the last layer; default: the placement's (pre: yes, post: no)
    ffn: ComponentSpec = component("feedforward", "gelu")  # the feed-forward sublayer
    # the token mixer of every layer (model.layers can change it per layer); attention's options are the
    # keys around it, another mixer's nest under it: {name: gated_deltanet, n_heads: 4}
    mixer: ComponentSpec = component("mixers", "attention")
    attention: ComponentSpec = component("attention", "global")  # the pattern: which keys a query sees, and the cache
    attention_kernel: ComponentSpec = component("attention_kernel", "sdpa")  # never changes the function
    attention_scale: Optional[float] = None  # multiplier on q.k; null: 1/sqrt(head_dim); T5: 1.0
    qk_norm: Optional[ComponentSpec] = component("norms", None)  # a norm over q and k before positions act
    # what qk_norm normalises: each head's q and k (one gain shared by the heads; Qwen3) or the whole
    # q and k projections, all heads at once (OLMo 2)
    qk_norm_scope: Literal["head", "projection"] = field(default="head", metadata={"acts_with": "qk_norm"})
    attn_logit_softcap: Optional[float] = None  # scores -> cap * tanh(scores / cap) before the mask (Gemma 2: 50)
    final_logit_softcap: Optional[float] = None  # the head's output -> cap * tanh(logits / cap) (Gemma 2: 30)
    head: ComponentSpec = component("heads", "lm")  # what the model outputs: vocabulary logits, labels, a vector
    init: ComponentSpec = component("init", "normal")  # how the weights are initialised
    parametrization: ComponentSpec = component("parametrizations", "standard")  # how init and lrs scale with width (mup)
    dropout: float = 0.0  # residual paths
    attention_dropout: Optional[float] = None  # default: dropout
    embedding_dropout: Optional[float] = None  # default: dropout
    bias: bool = True  # biases in attention and feed-forward projections
    scale_embeddings: bool = False  # multiply token embeddings by sqrt(d_model)
    type_vocab_size: int = 0  # token-type (segment) embeddings added to the tokens' (BERT: 2); 0: none
    embedding_norm: bool = False  # a model.norm over the embeddings once positions are added (BERT)
    tie_embeddings: bool = True  # output projection shares the token embedding
    tie_encoder_decoder_embeddings: bool = False  # encoder_decoder: one token embedding for both stacks
    pad_token_id: int = 0  # kept with the model; training pads batches with its tokenizer's pad id
    layers: Optional[List[Dict[str, Any]]] = None  # per-layer changes: ranges / repeating patterns (config.layers)

    # Resolved views of the defaults above.
    @property
    def encoder_layers(self) -> int:
        return self.n_encoder_layers if self.n_encoder_layers is not None else self.n_layers

    @property
    def decoder_layers(self) -> int:
        return self.n_decoder_layers if self.n_decoder_layers is not None else self.n_layers

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads if self.n_kv_heads is not None else self.n_heads

    @property
    def dim_per_head(self) -> int:
        return self.head_dim if self.head_dim is not None else self.d_model // self.n_heads

    def rate(self, name: str) -> float:
        value = getattr(self, name)
        return self.dropout if value is None else value


@dataclass(frozen=True)
class ResolvedModel:
    """A validated model config with ``model.layers`` resolved: each stack's per-layer configs, in
    order. What ``build_model`` builds; ``validation.resolved_model`` makes it, once, at the edge."""

    config: ModelConfig  # the model as validated (defaults that depend on other keys filled in)
    stacks: Mapping[str, Tuple[ModelConfig, ...]]  # "encoder" / "decoder" -> one config per layer

    def layers(self, stack: str) -> List[ModelConfig]:
        return list(self.stacks[stack])


@dataclass(frozen=True)
class TrainConfig:
    max_steps: int = 1000  # optimizer steps
    init_from: Optional[str] = None  # start from this run's weights: a run directory (trained or imported by `arch-zoo import`) or its .ckpt; loaded strictly (every tensor, same shapes); optimizer, step and schedule start fresh (fine-tuning; a rerun resumes from this run's own checkpoint); null: fresh initialisation
    batch_size: int = 32  # per device
    group_by_length: int = 0  # >= 2: sort each run of this many batches by length (less padding); 0: off
    eval_batch_size: Optional[int] = None  # default: batch_size
    optimizer: ComponentSpec = component("optimizers", "adamw")  # adamw, adam, sgd, muon ({name: muon, ...})
    lr: float = 1e-3  # peak learning rate
    weight_decay: float = 0.0  # decoupled for adamw, L2 for adam/sgd; never on biases, norms, embeddings
    betas: List[float] = field(default_factory=lambda: [0.9, 0.98])  # adamw and adam
    momentum: float = 0.9  # sgd only
    schedule: ComponentSpec = component("schedules", "constant")  # constant, cosine, noam, wsd; each with linear warmup
    warmup_steps: int = 0  # linear warmup from 0 to lr
    min_lr_ratio: float = 0.0  # cosine and wsd decay to lr * min_lr_ratio
    label_smoothing: float = 0.0  # of the cross-entropy targets
    z_loss: float = 0.0  # weight on the mean squared log-normaliser of the output softmax (PaLM: 1e-4); 0: off
    grad_clip: Optional[float] = 1.0  # max global grad norm; null disables
    accumulate_grad_batches: int = 1  # batches whose gradients make one optimizer step
    precision: str = "32-true"  # Lightning precision: 32-true, bf16-mixed, 16-mixed, ...
    compile: bool = False  # torch.compile the model for training and evaluation (one graph where it holds)
    compile_mode: str = "default"  # torch.compile mode: default, reduce-overhead, max-autotune, max-autotune-no-cudagraphs
    tf32: bool = True  # TF32 matmuls where CUDA is (Ampere and later); false keeps full fp32 matmuls
    accelerator: str = "auto"  # Lightning accelerator: auto, cpu, gpu, ...
    devices: Any = 1  # Lightning devices: 1, 2, "auto", [0, 1]
    strategy: str = "auto"  # Lightning strategy: auto, ddp, fsdp (CUDA only), ...
    num_nodes: int = 1  # machines the strategy spans (Lightning's num_nodes; launched by Slurm/torchrun)
    val_every: int = 200  # steps between validations (and checkpoints)
    val_batches: Optional[int] = None  # cap on batches per evaluation split
    exact_match_samples: int = 256  # held-out examples decoded greedily for exact match
    exact_match_decoding: str = "auto"  # eager, compiled (static cache + compiled step), auto: compiled where it pays
    log_every: int = 10  # steps between training-metric rows in metrics.csv
    attention_diagnostics: bool = False  # per layer attention entropy, largest attention logit and mass on the first token on evaluation batches (val/attn_entropy/layer_0, val/attn_max_logit/layer_0, val/attn_first_token/layer_0, ...; val/attn_first_token: the layers' mean)
    attention_diagnostics_every: int = 0  # with attention_diagnostics, also every N training steps (train/attn_...; N a multiple of log_every); 0: evaluation only
    progress_bar: bool = True  # `arch-zoo train` shows step/max, loss, tokens/s and ETA as it trains (redrawn on a terminal, a line every 10-30 s elsewhere)
    num_workers: int = 0  # data loader processes (0: in the training process)

    @property
    def examples_per_step(self) -> int:
        """Examples one optimizer step trains: per device, times accumulation and the device count."""
        d = self.devices
        devices = len(d) if isinstance(d, (list, tuple)) else d if isinstance(d, int) else 1
        return self.batch_size * self.accumulate_grad_batches * max(1, devices)


@dataclass(frozen=True)
class WandbConfig:
    enabled: bool = False  # log through Lightning's WandbLogger
    project: str = "arch_zoo"  # the wandb project
    entity: Optional[str] = None  # the wandb team or user (null: your default)
    group: Optional[str] = None  # null: a sweep's runs get the sweep's name
    job_type: Optional[str] = None  # null: a sweep's runs get their variant
    tags: List[str] = field(default_factory=list)  # a sweep's runs also get axis=value tags
    mode: Optional[Literal["online", "offline", "disabled"]] = None  # null: $WANDB_MODE, else offline without a key


@dataclass(frozen=True)
class TensorBoardConfig:
    enabled: bool = False  # log through Lightning's TensorBoardLogger
    save_dir: Optional[str] = None  # null: <sweep dir>/tensorboard for a sweep's runs, else <run dir>/tensorboard


@dataclass(frozen=True)
class MLflowConfig:
    enabled: bool = False  # log through Lightning's MLFlowLogger
    tracking_uri: Optional[str] = None  # null: sqlite:///<sweep dir>/mlflow.db (a loose run: next to its run dir)
    experiment: Optional[str] = None  # null: the sweep's name, else the run's (config name)


@dataclass(frozen=True)
class LoggingConfig:
    wandb: WandbConfig = field(default_factory=WandbConfig)  # Weights & Biases
    tensorboard: TensorBoardConfig = field(default_factory=TensorBoardConfig)  # TensorBoard, with an HParams record
    mlflow: MLflowConfig = field(default_factory=MLflowConfig)  # MLflow tracking


@dataclass(frozen=True)
class ExperimentConfig:
    name: str = "experiment"  # names the run (default run directory: runs/<name>)
    seed: int = 0  # fixes initialisation, data generation and data order
    plugins: List[str] = field(default_factory=list)  # modules or .py files registering components (arch_zoo.config.plugins)
    model: ModelConfig = field(default_factory=ModelConfig)  # the architecture
    task: Optional[ComponentSpec] = component("tasks", None)  # required to train, not to describe
    train: TrainConfig = field(default_factory=TrainConfig)  # optimisation, evaluation and devices
    logging: LoggingConfig = field(default_factory=LoggingConfig)  # live loggers (metrics.csv is always written)
    # ``model`` resolved by validation (never read from or saved to YAML); it holds for ``model`` only
    # while it is that very object, so a config made by dataclasses.replace(cfg, model=...) resolves anew
    resolved_model: Optional[ResolvedModel] = derived_field()

    def resolved(self) -> Optional[ResolvedModel]:
        """The validated resolution of ``model``, or None where ``model`` was not validated as it is."""
        r = self.resolved_model
        return r if r is not None and r.config is self.model else None
