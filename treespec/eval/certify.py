"""A losslessness certificate: the exact law of the first L tokens, seeded draws of the engine's own code,
and tests whose power is stated.

Two levels, one statistic:
  verification  `verification_draws`: treespec.decode.verify on a fixed irregular tree whose nodes take their p and
                q rows from random context-indexed tables (each node its own rows, looked up by its token
                path); children are drawn by the mode's drafting rule, vectorised over draws; each step's
                output (accepted tokens + bonus) is continued by sampling the target table up to L tokens.
                The law to match is the target table's own: p(x1) p(x2 | x1) ... (`table_law`).
                Greedy is deterministic given the rows: `greedy_verification` checks it exactly over many
                random tables. A drafting rule with other q rows (e.g. a vocabulary subset: q zero outside
                it) is a `RowTables` built by the caller.
  end to end    `target_law` enumerates a tiny model's exact law of its first L new tokens; `EngineDecoder`
                runs treespec.api.generate with seeds. Any other decoding path (vocabulary-subset drafts,
                adaptive depth, batches) plugs in as a `Decode`: seeds -> token sequences.
`certify(sequences, law, alpha)`: a Pearson chi-square over the joint of the L tokens, and one conditional
chi-square per position (summed over prefixes: "is token j distributed as p(. | tokens < j)"), Holm-corrected
as one family; `detectable_bias` is its power: the smallest relative over-weighting of a token of
probability 0.2 at the first position that the run detects with probability 0.9 (noncentral chi-square).

After an EOS a sequence ends; it is padded with the symbol END (= vocabulary size) so every run is L symbols.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import product

import numpy as np
import torch
from scipy import optimize, stats

from treespec import api
from treespec.decode import verify as verify_module
from treespec.decode.sampling import SamplingConfig, probabilities
from treespec.decode.tree import TreeShape
from treespec.models.eagle_head import init_eagle_from_target
from treespec.models.medusa_head import new_heads

Decode = Callable[[Sequence[int]], Sequence[Sequence[int]]]  # seeds -> one token sequence per seed

MIN_EXPECTED = 5.0  # Pearson cells with a smaller expected count are pooled
P0 = 0.2  # the power statement is for a token of this probability
POWER = 0.9


# ----------------------------------------------------------------------------------------------- laws


def _offsets(symbols: int, length: int) -> list[int]:
    """offsets[j] = index of the first prefix of length j (prefixes of all lengths, row-major by symbol)."""
    return [sum(symbols**i for i in range(j)) for j in range(length + 1)]


@dataclass(frozen=True)
class SequenceLaw:
    """The exact law of L-symbol sequences, as the next-symbol law after every prefix shorter than L.

    rows [P, S] float64: row `offsets[j] + code(prefix)` is the law of symbol j+1 after a j-symbol prefix
    (code = the prefix read as a base-S number). `end` is the padding symbol after EOS, or None.
    """

    rows: np.ndarray
    length: int
    end: int | None = None

    def __post_init__(self):
        expected = _offsets(self.symbols, self.length)[-1]
        if self.rows.shape[0] != expected:
            raise ValueError(f"a law of length {self.length} over {self.symbols} symbols needs {expected} rows, "
                             f"got {self.rows.shape[0]}")

    @property
    def symbols(self) -> int:
        return self.rows.shape[1]

    def level(self, j: int) -> np.ndarray:
        """[S^j, S] next-symbol rows after every prefix of length j."""
        offsets = _offsets(self.symbols, self.length)
        return self.rows[offsets[j]: offsets[j + 1]]

    def joint(self) -> np.ndarray:
        """[S^L] probability of every full sequence (row-major codes)."""
        joint = np.ones(1)
        for j in range(self.length):
            joint = (joint[:, None] * self.level(j)).reshape(-1)
        return joint

    def encode(self, sequences: np.ndarray) -> np.ndarray:
        """[R, L] symbols -> [R] codes."""
        weights = self.symbols ** np.arange(self.length - 1, -1, -1)
        return sequences.astype(np.int64) @ weights

    def sample_next(self, prefixes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One next symbol for each [R, j] prefix (all of the same length j), drawn from the law."""
        j = prefixes.shape[1]
        codes = prefixes.astype(np.int64) @ (self.symbols ** np.arange(j - 1, -1, -1, dtype=np.int64))  # [R]
        cum = self.level(j)[codes].cumsum(1)
        u = rng.random(len(prefixes))[:, None] * cum[:, -1:]
        return np.minimum((cum <= u).sum(1), self.symbols - 1)


def table_law(rows: np.ndarray, length: int) -> SequenceLaw:
    """The law whose next-token rows are a context-indexed table [P, V] (normalised in float64)."""
    rows = np.asarray(rows, dtype=np.float64)
    return SequenceLaw(rows / rows.sum(1, keepdims=True), length)


@torch.no_grad()
def target_law(model, prompt: Sequence[int], length: int, sampling: SamplingConfig, eos_token_id: int | None = None
               ) -> SequenceLaw:
    """The exact law of the first `length` new tokens of `model` after `prompt`, by enumeration (one batched
    forward over every continuation of length L-1; a vocabulary of 6-8 keeps it small). With an EOS the
    symbols are V + 1: END follows EOS and END."""
    vocab = model.config.get_text_config().vocab_size
    if length < 1:
        raise ValueError(f"length must be >= 1, got {length}")
    if vocab ** (length - 1) > 100_000:
        raise ValueError(f"enumerating {vocab}^{length - 1} continuations is too much; use a smaller vocabulary or L")
    tails = list(product(range(vocab), repeat=length - 1))
    inputs = torch.tensor([list(prompt) + list(t) for t in tails], dtype=torch.long)
    device = next(model.parameters()).device
    logits = model(input_ids=inputs.to(device)).logits[:, len(prompt) - 1:].float().cpu()  # [V^(L-1), L, V]
    probs = probabilities(logits, sampling).double()
    probs = probs / probs.sum(-1, keepdim=True)
    symbols = vocab + (eos_token_id is not None)
    end = vocab if eos_token_id is not None else None
    rows = np.zeros((_offsets(symbols, length)[-1], symbols))
    row = 0
    for j in range(length):
        for prefix in product(range(symbols), repeat=j):
            if end is not None and any(t in (eos_token_id, end) for t in prefix):
                rows[row, end] = 1.0
            else:
                code = sum(t * vocab ** (length - 2 - i) for i, t in enumerate(prefix))
                rows[row, :vocab] = probs[code, j].numpy()
            row += 1
    return SequenceLaw(rows, length, end)


def pad_runs(runs: Sequence[Sequence[int]], law: SequenceLaw, eos_token_id: int | None = None) -> np.ndarray:
    """Token sequences -> [R, L] symbols: cut to L, END after an EOS; a run shorter than L must end in EOS."""
    out = np.empty((len(runs), law.length), dtype=np.int64)
    for r, tokens in enumerate(runs):
        tokens = list(tokens)[: law.length]
        if len(tokens) < law.length:
            if law.end is None or not tokens or tokens[-1] != eos_token_id:
                raise ValueError(f"run {r} has {len(tokens)} tokens, fewer than L = {law.length}, and did not end in EOS")
            tokens += [law.end] * (law.length - len(tokens))
        out[r] = tokens
    return out


# ---------------------------------------------------------------------------------------------- tests


def _pearson(observed: np.ndarray, expected: np.ndarray) -> tuple[float, int]:
    """Pearson statistic and df over cells with expected > 0; cells under MIN_EXPECTED pooled into one
    (merged into the smallest large cell when the pool itself stays small)."""
    positive = expected > 0
    observed, expected = observed[positive].astype(np.float64), expected[positive]
    small = expected < MIN_EXPECTED
    obs, exp = list(observed[~small]), list(expected[~small])
    if small.any():
        pooled_obs, pooled_exp = observed[small].sum(), expected[small].sum()
        if pooled_exp >= MIN_EXPECTED or not exp:
            obs.append(pooled_obs)
            exp.append(pooled_exp)
        else:
            i = int(np.argmin(exp))
            obs[i] += pooled_obs
            exp[i] += pooled_exp
    if len(exp) < 2:
        return 0.0, 0
    obs, exp = np.array(obs), np.array(exp)
    return float(((obs - exp) ** 2 / exp).sum()), len(exp) - 1


def detectable_bias(runs: float, df: int, alpha: float, power: float = POWER, p0: float = P0) -> float:
    """The smallest relative bias d (a token of probability p0 emitted with p0 (1 + d), the others scaled
    down alike) that a chi-square test with `df` degrees of freedom at level `alpha` over `runs` draws
    detects with probability `power`: noncentrality runs * p0 d^2 / (1 - p0). 0 when df = 0 (a
    deterministic law: any deviation is a sequence of probability 0)."""
    if df <= 0:
        return 0.0
    if runs <= 0:
        return math.inf
    critical = stats.chi2.isf(alpha, df)
    lam = optimize.brentq(lambda x: stats.ncx2.sf(critical, df, x) - power, 1e-9, 1e7)
    return math.sqrt(lam * (1 - p0) / (p0 * runs))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values, in the input order."""
    m = len(p_values)
    order = np.argsort(p_values)
    adjusted, running = [0.0] * m, 0.0
    for k, i in enumerate(order):
        running = max(running, min(1.0, (m - k) * p_values[i]))
        adjusted[i] = running
    return adjusted


@dataclass(frozen=True)
class Verdict:
    runs: int
    statistic: float  # Pearson chi-square over the joint of the L symbols
    df: int
    p_value: float  # the family's smallest Holm-adjusted p-value (joint + one conditional test per position)
    tests: dict[str, tuple[float, int, float]]  # name -> (statistic, df, raw p-value)
    impossible: int  # runs that produced a sequence of probability 0 under the law
    alpha: float
    detectable_bias: float  # first position, token of probability 0.2, power 0.9, level alpha / tests
    position_bias: tuple[float, ...]  # per position: the same for a bias confined to its most frequent prefix

    @property
    def passed(self) -> bool:
        return self.impossible == 0 and self.p_value >= self.alpha


def certify(sequences: np.ndarray, law: SequenceLaw, alpha: float = 1e-3) -> Verdict:
    """Test [R, L] symbol sequences against `law` (see module docstring)."""
    sequences = np.asarray(sequences)
    runs, length, symbols = len(sequences), law.length, law.symbols
    if sequences.ndim != 2 or sequences.shape[1] != length:
        raise ValueError(f"sequences must be [R, {length}], got {sequences.shape}")
    counts = np.bincount(law.encode(sequences), minlength=symbols**length).astype(np.float64)
    joint = law.joint()
    impossible = int(counts[joint <= 0].sum())
    statistic, df = _pearson(counts, runs * joint)
    tests = {"joint": (statistic, df, float(stats.chi2.sf(statistic, df)) if df else 1.0)}
    shares = []
    for j in range(length):
        block = counts.reshape(symbols**j, symbols, symbols ** (length - 1 - j)).sum(2)  # [S^j, S]
        totals = block.sum(1)
        stat_j, df_j = 0.0, 0
        for code in np.flatnonzero(totals):
            s, d = _pearson(block[code], totals[code] * law.level(j)[code])
            stat_j, df_j = stat_j + s, df_j + d
        tests[f"position {j + 1}"] = (stat_j, df_j, float(stats.chi2.sf(stat_j, df_j)) if df_j else 1.0)
        shares.append(totals.max() / max(runs, 1))
    if impossible:
        tests = {k: (s, d, 0.0) for k, (s, d, _) in tests.items()}
    adjusted = holm([p for _, _, p in tests.values()])
    level = alpha / len(tests)
    first_df = int((law.level(0)[0] > 0).sum()) - 1
    position_bias = tuple(detectable_bias(runs * share, tests[f"position {j + 1}"][1] if j else first_df, level)
                          for j, share in enumerate(shares))
    return Verdict(runs, statistic, df, min(adjusted), tests, impossible, alpha, position_bias[0], position_bias)


def biased_law(law: SequenceLaw, delta: float, token: int | None = None) -> SequenceLaw:
    """The law with first symbol `token` (default: the most likely) over-weighted by (1 + delta), the others
    scaled down alike (a control for the power statement)."""
    rows = law.rows.copy()
    first = rows[0]
    token = int(first.argmax()) if token is None else token
    mass = first[token]
    scaled = first * (1 - mass * (1 + delta)) / (1 - mass)
    scaled[token] = mass * (1 + delta)
    rows[0] = scaled
    return SequenceLaw(rows, law.length, law.end)


def sample_law(law: SequenceLaw, runs: int, seed: int) -> np.ndarray:
    """[R, L] sequences drawn from the law itself (for calibration)."""
    rng = np.random.default_rng(seed)
    out = np.empty((runs, law.length), dtype=np.int64)
    for j in range(law.length):
        out[:, j] = law.sample_next(out[:, :j], rng)
    return out


# --------------------------------------------------------------------------------- verification level


@dataclass(frozen=True)
class RowTables:
    """Per-context rows for the verification level: index = prefix index (as in SequenceLaw) of a node's
    token path. target [P, V] processed p (float32, as the engine makes it); draft [P, V] the q that
    children are drawn from and that verification reads (greedy: draft probabilities at temperature 1,
    whose ranking is the draft's top-k)."""

    target: torch.Tensor
    draft: torch.Tensor
    length: int

    def law(self) -> SequenceLaw:
        return table_law(self.target.double().numpy(), self.length)


def random_tables(vocab: int, length: int, sampling: SamplingConfig, seed: int, *, scale: float = 1.5,
                  draft_noise: float = 1.0) -> RowTables:
    """Random target logits (N(0, scale^2)) and draft logits = target + N(0, draft_noise^2), for every token
    path shorter than `length`, processed by `sampling` (p and q alike, as the engine does)."""
    g = torch.Generator().manual_seed(seed)
    rows = _offsets(vocab, length)[-1]
    target_logits = scale * torch.randn(rows, vocab, generator=g)
    draft_logits = target_logits + draft_noise * torch.randn(rows, vocab, generator=g)
    target = probabilities(target_logits, sampling)
    draft = probabilities(draft_logits, SamplingConfig(1.0) if sampling.greedy else sampling)
    return RowTables(target, draft, length)


@dataclass(frozen=True)
class Draws:
    sequences: np.ndarray  # [R, L] step output continued by the target table
    emitted: np.ndarray  # [R] tokens the step itself produced (accepted + bonus)
    events: Counter = field(default_factory=Counter)  # depth >= 2 acceptances, non-first siblings, full depth


def _draft_children(q: np.ndarray, k: int, mode: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """[D, V] rows -> picked tokens [D, k] and which of them exist [D, k], by the mode's drafting rule."""
    support = (q > 0).sum(1)
    if mode == "without_replacement":  # Gumbel-top-k: k distinct tokens without replacement
        with np.errstate(divide="ignore"):
            keys = np.log(q) - np.log(-np.log(rng.random(q.shape)))
        picked = np.argsort(-keys, axis=1, kind="stable")[:, :k]
        return picked, np.arange(k)[None] < support[:, None]
    if mode == "with_replacement":  # k i.i.d. draws
        cum = q.cumsum(1)
        u = rng.random((len(q), k)) * cum[:, -1:]
        picked = np.minimum((cum[:, None, :] <= u[..., None]).sum(-1), q.shape[1] - 1)
        return picked, np.ones_like(picked, dtype=bool)
    picked = np.argsort(-q, axis=1, kind="stable")[:, :k]  # deterministic / greedy: the draft's top-k
    if mode == "greedy":
        return picked, np.ones_like(picked, dtype=bool)
    return picked, np.arange(k)[None] < support[:, None]


def verification_draws(shape: TreeShape, mode: str, tables: RowTables, draws: int, seed: int) -> Draws:
    """`draws` seeded steps of treespec.decode.verify on `shape` (see module docstring). The tree's levels must not
    exceed tables.length, the number of tokens each draw is continued to."""
    if shape.levels > tables.length:
        raise ValueError(f"a tree of {shape.levels} levels emits up to {shape.levels} tokens; tables hold {tables.length}")
    vocab = tables.target.shape[1]
    offsets = _offsets(vocab, tables.length)
    rng = np.random.default_rng(seed)
    q_table = tables.draft.double().numpy()
    n = shape.size
    ctx = np.zeros((draws, n), dtype=np.int64)
    tok = np.zeros((draws, n), dtype=np.int64)
    exists = np.zeros((draws, n), dtype=bool)
    exists[:, 0] = True
    for v in range(n):
        kids = shape.children[v]
        if not kids:
            continue
        picked, valid = _draft_children(q_table[ctx[:, v]], len(kids), mode, rng)
        j = shape.depths[v]
        for rank, c in enumerate(kids):
            tok[:, c] = picked[:, rank]
            exists[:, c] = exists[:, v] & valid[:, rank]
            ctx[:, c] = offsets[j + 1] + (ctx[:, v] - offsets[j]) * vocab + picked[:, rank]
    generator = torch.Generator().manual_seed(seed)
    draft_rows = None if mode == "greedy" else tables.draft
    complete = exists.all(1)
    sequences = np.zeros((draws, tables.length), dtype=np.int64)
    emitted = np.zeros(draws, dtype=np.int64)
    events: Counter = Counter()
    ctx_t = torch.from_numpy(ctx)
    for d in range(draws):
        children = shape.children if complete[d] else [[c for c in kids if exists[d, c]] for kids in shape.children]
        rows = ctx_t[d]
        tokens = tok[d].tolist()
        result = verify_module.verify(tokens, children, tables.target[rows],
                                      None if draft_rows is None else draft_rows[rows], mode, generator)
        out = [tokens[i] for i in result.accepted[1:]] + [result.bonus]
        sequences[d, : len(out)] = out
        emitted[d] = len(out)
        if len(result.accepted) >= 3:
            events["depth >= 2"] += 1
        if any(shape.ranks[i] > 0 for i in result.accepted[1:]):
            events["non-first sibling"] += 1
        if len(result.accepted) == shape.levels:
            events["full depth + bonus"] += 1
    law = tables.law()
    for j in range(1, tables.length):  # continue each step's output by the target's own sampling
        short = emitted <= j
        if short.any():
            sequences[short, j] = law.sample_next(sequences[short, :j], rng)
    return Draws(sequences, emitted, events)


def greedy_verification(shape: TreeShape, vocab: int, seeds: Sequence[int], *, draft_noise: float = 0.5,
                        alpha: float = 1e-3) -> tuple[Verdict, Counter]:
    """Greedy verification is deterministic given the rows, so it is checked over one random table per seed:
    every step's output, continued by the table's argmax, must be the table's argmax path. Returns a
    Verdict (`impossible` = mismatches) and the events over all seeds."""
    mismatches, events = 0, Counter()
    for seed in seeds:
        tables = random_tables(vocab, shape.levels, SamplingConfig(0.0), seed, draft_noise=draft_noise)
        draws = verification_draws(shape, "greedy", tables, 1, seed)
        mismatches += certify(draws.sequences, tables.law(), alpha).impossible
        events.update(draws.events)
    runs = len(seeds)
    return Verdict(runs, 0.0, 0, 0.0 if mismatches else 1.0, {}, mismatches, alpha, 0.0, ()), events


# ---------------------------------------------------------------------------------------------- end to end


def tiny_lm(arch: str = "llama", *, seed: int = 0, vocab: int = 6, hidden: int = 16, layers: int = 1,
            init_range: float = 0.3, sharpness: float = 1.0):
    """A tiny random causal LM (fp32, eval) whose next-token law depends strongly on the context.

    transformers' default initialisation (std 0.02) makes tiny models near-bigram: attention is uniform and
    the values are small, so a wrong KV slot hardly moves p and a cache bug would pass a statistical test.
    A std of 0.3 makes earlier tokens matter (a commit that keeps the wrong slots is then caught)."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    common = dict(vocab_size=vocab, bos_token_id=None, eos_token_id=None, pad_token_id=None, initializer_range=init_range)
    if arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                             **common))
    elif arch == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                             use_sliding_window=False, **common))
    elif arch == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(n_embd=hidden, n_layer=layers, n_head=4, n_positions=64, **common))
    else:
        raise ValueError(f"unknown architecture '{arch}', expected llama, qwen2 or gpt2")
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(sharpness)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model.eval()


def eagle_head_for(target, seed: int = 0, noise: float = 0.05):
    """A small EAGLE head for a tiny Llama-style target (`init_eagle_from_target` over the whole vocabulary), moved
    off its identity-like initialisation by N(0, noise^2) so that it drafts imperfectly."""
    torch.manual_seed(seed)
    head = init_eagle_from_target(target, list(range(target.config.vocab_size)))
    with torch.no_grad():
        for p in head.parameters():
            p.add_(noise * torch.randn_like(p))
    return head.eval()


def medusa_heads_for(target, num_heads: int = 3, seed: int = 0, noise: float = 0.5):
    """Medusa heads for a tiny target, moved off their identity initialisation (each head the target's own
    next-token guess) by N(0, noise^2) weights, so that their guesses differ by head and are often wrong."""
    torch.manual_seed(seed)
    heads = new_heads(target, num_heads)
    with torch.no_grad():
        for p in heads.parameters():
            if p.is_floating_point():
                p.add_(noise * torch.randn_like(p))
    return heads.eval()


class EngineDecoder:
    """A `Decode` for treespec.generate: seeded runs of `length` new tokens with a fixed target, draft,
    prompt, tree policy and sampling. `events` counts runs in which something happened that the
    certificate needs to have exercised (see `RUN_EVENTS`). `draft_vocab` [S]: the draft proposes from those ids
    only. `batch` B > 1: runs go through `treespec.generate_batch`, B seeds per call, next to one longer
    `filler` prompt (its row is dropped) so that every batch is ragged and padded."""

    def __init__(self, target, draft, prompt: Sequence[int], tree, length: int, *, temperature: float = 1.0,
                 top_p: float = 1.0, top_k: int = 0, eos_token_id: int | None = None, draft_vocab=None,
                 batch: int = 1, filler: Sequence[int] = ()):
        self.target, self.draft, self.prompt, self.tree, self.length = target, draft, list(prompt), tree, length
        self.sampling = dict(temperature=temperature, top_p=top_p, top_k=top_k)
        self.eos_token_id = eos_token_id
        self.draft_vocab, self.batch, self.filler = draft_vocab, batch, list(filler)
        if batch > 1 and len(self.filler) <= len(self.prompt):
            raise ValueError("a batched decoder needs a filler prompt longer than the prompt")
        self.events: Counter = Counter()

    def __call__(self, seeds: Sequence[int]) -> list[tuple[int, ...]]:
        out = []
        if self.batch > 1:
            for start in range(0, len(seeds), self.batch):
                chunk = [int(s) for s in seeds[start:start + self.batch]]
                rows = api.generate_batch(self.target, self.draft, [self.prompt] * len(chunk) + [self.filler],
                                               tree=self.tree, max_new_tokens=self.length,
                                               seed=chunk + [chunk[0] + 7_919_993], eos_token_id=self.eos_token_id,
                                               draft_vocab=self.draft_vocab, **self.sampling)[:len(chunk)]
                for g in rows:
                    self.events.update(run_events(g))
                    out.append(tuple(g.tokens))
            return out
        for seed in seeds:
            g = api.generate(self.target, self.draft, self.prompt, tree=self.tree, max_new_tokens=self.length,
                                  seed=int(seed), eos_token_id=self.eos_token_id, draft_vocab=self.draft_vocab,
                                  **self.sampling)
            self.events.update(run_events(g))
            out.append(tuple(g.tokens))
        return out


RUN_EVENTS = (
    "depth >= 2",  # a step accepted two or more drafted tokens
    "non-first sibling",  # a step accepted a node of sibling rank > 0
    "non-contiguous commit, then more",  # a step that was not the last accepted a rank > 0 node (its slots were gathered)
    "full depth + bonus, then more",  # a step that was not the last accepted its whole depth and its bonus
    "eos",
)


def run_events(generation) -> set[str]:
    """Which of RUN_EVENTS happened in one treespec Generation."""
    events = set()
    steps = generation.steps
    for i, step in enumerate(steps):
        later = i + 1 < len(steps)
        if len(step.accepted_ranks) >= 2:
            events.add("depth >= 2")
        if any(r > 0 for r in step.accepted_ranks):
            events.add("non-first sibling")
            if later:
                events.add("non-contiguous commit, then more")
        if later and step.tree_depth > 1 and step.accepted == step.tree_depth:
            events.add("full depth + bonus, then more")
    if generation.stop_reason == "eos":
        events.add("eos")
    return events


def run_case(decode: Decode, law: SequenceLaw, runs: int, *, seed: int = 0, alpha: float = 1e-3,
             eos_token_id: int | None = None) -> Verdict:
    """Decode `runs` seeded runs (seeds seed .. seed + runs - 1) and certify them against `law`."""
    sequences = decode(range(seed, seed + runs))
    return certify(pad_runs(sequences, law, eos_token_id), law, alpha)
