"""The configuration of a draft's self-distillation (conf/train_draft.yaml, experiments/train_draft.py): plain
dataclasses, one per config group. The stages in treespec.training take a TrainDraftSchema instance (the Hydra entry
point converts its DictConfig with OmegaConf.to_object)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class PoolSpec:
    size: int = 32000


@dataclass
class ModeSpec:
    name: str = "greedy"
    temperature: float = 0.0
    weight: float = 1.0


@dataclass
class CorpusSpec:
    dir: Optional[str] = None  # default: corpus/<target> in the repository for a built-in target, else <run>/corpus


@dataclass
class GenerateSpec:
    prompts: Optional[int] = None  # answer the first N pool prompts in all (None: the whole pool)
    max_new_tokens: int = 192
    batch_size: int = 64
    shard_prompts: int = 384
    max_shards: Optional[int] = None  # at most this many new shards in this run
    max_hours: Optional[float] = None  # start no new shard after this long
    dtype: str = "auto"  # auto: bfloat16 where the CPU has AMX / AVX512-BF16, else float32
    bf16_check: int = 16  # greedy prompts per bf16 shard regenerated in fp32 (0: none)
    modes: list[ModeSpec] = field(default_factory=list)


@dataclass
class FollowupSpec:
    train: bool = True  # teacher, vocab and train also read the corpus's second turns (<corpus>/turn2) when it has any


@dataclass
class SelfPromptSpec:
    count: int = 100000  # requests (numbered from 0) that the self_prompts stage may write in all
    temperature: float = 1.0  # sampling temperature of the requests
    max_query_tokens: int = 96  # a request not finished within this many tokens is rejected
    train: bool = True  # teacher, vocab and train also read the self-prompt part (<corpus>/self) when it has any


@dataclass
class TeacherSpec:
    keep_top: int = 20
    tokens_per_batch: int = 4096
    dtype: str = "float32"  # the target's precision when teacher forcing: float32, bfloat16 or auto (bf16 where fast)


@dataclass
class VocabSpec:
    size: int = 6144
    grow: bool = False  # with draft.init_from (eagle): add the most frequent answer tokens the start lacks, up to size


@dataclass
class DraftSpec:
    kind: str = "plain"  # plain: an independent causal LM; eagle: a head reading the target's hidden state
    init_layers: list[int] = field(default_factory=lambda: [0, 1])  # plain: target layers copied
    embed_rank: int = 48  # plain: rank of the factorised input embedding
    eagle_init_layer: Optional[int] = None  # eagle: target layer copied into the head's decoder layer (None: fresh)
    eagle_layers: int = 1  # eagle: decoder layers in the head (with init_from, layers beyond the start's are fresh)
    feature_weight: float = 0.1  # eagle: weight of the feature regression next to the cross-entropy
    feature_noise: float = 0.1  # eagle: relative noise on input features during training
    freeze_head: bool = True  # eagle: keep the target's output rows as the head's LM head
    eagle_unroll: int = 1  # eagle: levels trained (level d > 1: the head reading its own features, as a node d-1 below the root)
    eagle_feature_layers: list[int] = field(default_factory=list)  # eagle: target hidden states fused ([]: the last)
    init_from: Optional[str] = None  # a draft directory (same kind and vocabulary) to start from instead of the target


@dataclass
class TrainSpec:
    holdout_fraction: float = 0.03
    max_len: int = 512
    tokens_per_batch: int = 6144
    epochs: int = 3
    max_steps: Optional[int] = None
    dtype: str = "float32"  # the training forward: float32, bfloat16 (CPU autocast) or auto (bf16 where fast)
    lr: float = 1e-3
    min_lr: float = 5e-5
    warmup_steps: int = 50
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    eval_every: int = 100
    checkpoint_every: int = 100


@dataclass
class ExportSpec:
    dir: Optional[str] = None
    dtype: str = "float16"


@dataclass
class TrainDraftSchema:
    target: str = "smollm2-135m-instruct"
    seed: int = 0
    threads: int = 0
    stages: list[str] = field(default_factory=lambda: ["pool", "generate", "teacher", "vocab", "train", "export"])
    pool: PoolSpec = field(default_factory=PoolSpec)
    corpus: CorpusSpec = field(default_factory=CorpusSpec)
    generate: GenerateSpec = field(default_factory=GenerateSpec)
    followups: FollowupSpec = field(default_factory=FollowupSpec)
    self_prompts: SelfPromptSpec = field(default_factory=SelfPromptSpec)
    teacher: TeacherSpec = field(default_factory=TeacherSpec)
    vocab: VocabSpec = field(default_factory=VocabSpec)
    draft: DraftSpec = field(default_factory=DraftSpec)
    train: TrainSpec = field(default_factory=TrainSpec)
    export: ExportSpec = field(default_factory=ExportSpec)
