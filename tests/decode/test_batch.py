"""The engine at B > 1 rows: every row equals its single-prompt run (greedy, and seeded sampling) for every policy,
drafter and verification mode, a B-row drafter equals B one-row drafters, the padded cache equals a rebuilt one,
and sampling is lossless per row."""

import copy

import numpy as np
import pytest
import torch
from conftest import ARCHS, OneRow, tiny_model
from scipy import stats
from transformers import DynamicCache, GPT2Config, GPT2LMHeadModel

import treespec
from treespec import policies
from treespec.decode.cache import cache_length
from treespec.decode.engine import Decoder, StepOutcome
from treespec.decode.sampling import SamplingConfig, probabilities
from treespec.drafters import CausalLMDrafter, EagleDrafter, make_drafter
from treespec.errors import ConfigError
from treespec.models.eagle_head import EagleDraftConfig, EagleDraftModel
from treespec.models.quantize import quantize_draft_weights

PROMPTS = [[3, 17, 5, 9], [42], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], [8, 8]]  # ragged, one of a single token


def target_model(arch: str, **kwargs):
    """conftest's tiny model, but a GPT-2 with untied embeddings: tied to the sharpened output layer, the
    tiny GPT-2 only repeats its last token, which would make every draft right."""
    if arch != "gpt2":
        return tiny_model(arch, **kwargs)
    torch.manual_seed(kwargs.get("seed", 0))
    config = GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=256, tie_word_embeddings=False,
                        bos_token_id=None, eos_token_id=None, pad_token_id=None)
    model = GPT2LMHeadModel(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(kwargs.get("sharpness", 30.0))
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model.eval()


def noisy_copy(model, scale: float, seed: int):
    """The model with relative noise on every weight: a draft that agrees with it often, not always."""
    draft = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(scale * p.std() * torch.randn(p.shape, generator=generator))
    return draft


def eagle_head(target, seed: int = 3, vocab_stride: int = 2):
    """A random EAGLE head of the target's width over every other token, its LM head the target's rows."""
    text = target.config.get_text_config()
    hidden = text.hidden_size
    torch.manual_seed(seed)
    head = EagleDraftModel(EagleDraftConfig(
        output_token_ids=list(range(0, text.vocab_size, vocab_stride)), vocab_size=text.vocab_size, hidden_size=hidden,
        intermediate_size=2 * hidden, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=256))
    with torch.no_grad():
        head.lm_head.weight.copy_(target.get_output_embeddings().weight[head.output_ids])
        head.fc.weight.copy_(torch.cat([torch.eye(hidden), torch.eye(hidden)], dim=1))
        head.fc.bias.zero_()
        for p in head.layer.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return head.eval()


@pytest.fixture(scope="module", params=ARCHS)
def arch_models(request):
    target = target_model(request.param, seed=0)
    return request.param, target, {"lm": noisy_copy(target, 0.3, seed=5), "eagle": eagle_head(target),
                                   "int4": quantize_draft_weights(noisy_copy(target, 0.3, seed=5), "int4")}


VOCAB = torch.arange(0, 64, 2)  # a draft vocabulary subset: every other token


def _same_as_single(target, draft, prompts, tree, **kwargs):
    batch = treespec.generate_batch(target, draft, prompts, tree=tree, **kwargs)
    seed = kwargs.pop("seed", None)
    for b, (prompt, out) in enumerate(zip(prompts, batch)):
        single = treespec.generate(target, draft, prompt, tree=tree, seed=None if seed is None else seed + b, **kwargs)
        assert out.tokens == single.tokens, f"row {b}"
        assert [s.accepted for s in out.steps] == [s.accepted for s in single.steps], f"row {b}"
        assert out.stop_reason == single.stop_reason and out.prompt_len == len(prompt)
    return batch


TREES = {"kary": policies.KAry([2, 2]), "chain": policies.Chain(3), "dynamic": policies.Dynamic(8, 4, 3),
         "adaptive": policies.Adaptive(5, 0.2, 2), "sequoia": policies.Sequoia([0.6, 0.2, 0.1], 7, 4)}


@pytest.mark.parametrize("drafter", ["lm", "eagle", "lm vocabulary subset", "int4"])
@pytest.mark.parametrize("tree", list(TREES))
def test_batched_greedy_equals_per_prompt_greedy(arch_models, drafter, tree):
    """B = 4 ragged rows (one of a single token): every policy, every drafter."""
    arch, target, drafts = arch_models
    if drafter == "int4" and arch == "gpt2":
        pytest.skip("4-bit drafts are Llama/Qwen2-shaped here (GPT-2's fused projections are Conv1D)")
    draft = drafts["lm" if drafter == "lm vocabulary subset" else drafter]
    vocab = VOCAB if drafter == "lm vocabulary subset" else None
    batch = _same_as_single(target, draft, PROMPTS, TREES[tree], max_new_tokens=16, draft_vocab=vocab)
    if drafter == "lm":  # the noisy copy is accepted often, so trees of several depths are exercised
        assert sum(len(o.tokens) for o in batch) > 1.4 * sum(o.target_passes for o in batch)


def test_eager_attention_gives_the_same_rows():
    """The additive masks are exact in eager attention too (boolean 4-D masks are not: docs/algorithms.md)."""
    target = tiny_model("llama", seed=0, attn="eager")
    _same_as_single(target, noisy_copy(target, 0.3, seed=5), PROMPTS, TREES["kary"], max_new_tokens=12)
    _same_as_single(target, eagle_head(target), PROMPTS, TREES["dynamic"], max_new_tokens=12)


def test_batched_autoregressive_equals_transformers_greedy(arch_models):
    _, target, _ = arch_models
    batch = treespec.generate_batch(target, None, PROMPTS, tree=None, max_new_tokens=12)
    for prompt, out in zip(PROMPTS, batch):
        expected = target.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False)[0, len(prompt):].tolist()
        assert out.tokens == expected and out.target_passes == 12


def _eos_that_stops_only_row_0(outputs: list[list[int]], bonus_every: int | None = None) -> tuple[int, int]:
    """A token first emitted by row 0 at index k in [3, 12) (not at a bonus position when asked) and never by
    some other row: (token, k)."""
    for k in range(3, 12):
        token = outputs[0][k]
        if token in outputs[0][:k] or (bonus_every and k % bonus_every == bonus_every - 1):
            continue
        if any(token not in row for row in outputs[1:]):
            return token, k
    raise AssertionError("no token stops row 0 alone; change the prompts")


@pytest.mark.parametrize("drafter", ["self", "eagle"])
def test_rows_stop_at_eos_mid_tree_while_others_continue(arch_models, drafter):
    _, target, drafts = arch_models
    draft = target if drafter == "self" else drafts["eagle"]  # the target as its own draft accepts every token
    tree = policies.Chain(4)
    plain = treespec.generate_batch(target, draft, PROMPTS, tree=tree, max_new_tokens=20)
    eos, k = _eos_that_stops_only_row_0([o.tokens for o in plain], bonus_every=5 if drafter == "self" else None)
    batch = _same_as_single(target, draft, PROMPTS, tree, max_new_tokens=20, eos_token_id=eos)
    assert batch[0].stop_reason == "eos" and len(batch[0].tokens) == k + 1
    assert "max_new_tokens" in {o.stop_reason for o in batch[1:]}
    assert batch[0].target_passes < max(o.target_passes for o in batch) and batch[0].seconds < max(o.seconds for o in batch)
    if drafter == "self":  # EOS was a drafted node inside the accepted path, not the bonus token
        last = batch[0].steps[-1]
        assert len(last.accepted_ranks) == last.accepted >= 1


SAMPLED = {  # one tree per verification mode under sampling
    "without_replacement": policies.KAry([2, 2]),
    "with_replacement": policies.Paths([(0,), (1,), (0, 0), (1, 0)], children="with_replacement"),
    "deterministic": policies.Dynamic(8, 4, 3),
    "adaptive": policies.Adaptive(5, 0.2, 2),
}


@pytest.mark.parametrize("drafter", ["lm", "eagle", "lm vocabulary subset"])
@pytest.mark.parametrize("tree", list(SAMPLED))
def test_seeded_sampling_row_draws_like_its_single_prompt_run(drafter, tree):
    target = tiny_model("llama", seed=0, sharpness=8.0)
    draft = eagle_head(target) if drafter == "eagle" else noisy_copy(target, 0.3, seed=5)
    vocab = VOCAB if drafter == "lm vocabulary subset" else None
    kwargs = dict(max_new_tokens=16, temperature=0.8, top_p=0.9, seed=7, draft_vocab=vocab)
    eos, _ = _eos_that_stops_only_row_0([o.tokens for o in treespec.generate_batch(target, draft, PROMPTS,
                                                                                   tree=SAMPLED[tree], **kwargs)])
    batch = _same_as_single(target, draft, PROMPTS, SAMPLED[tree], eos_token_id=eos, **kwargs)
    assert {o.stop_reason for o in batch} == {"eos", "max_new_tokens"}


def _layers(cache):
    return [(layer.keys, layer.values) for layer in cache.layers]


@pytest.mark.parametrize("arch", ARCHS)
def test_padded_cache_equals_rebuilt_cache_for_every_row(arch):
    target = target_model(arch, seed=0)
    draft = noisy_copy(target, 0.3, seed=5)
    plain = treespec.generate_batch(target, draft, PROMPTS, tree=policies.KAry([2, 2]), max_new_tokens=24)
    eos, _ = _eos_that_stops_only_row_0([o.tokens for o in plain])
    decoder = Decoder(target, make_drafter(draft, target, 64), PROMPTS, policy=policies.KAry([2, 2]),
                      sampling=SamplingConfig(), max_new_tokens=24, generators=[None] * len(PROMPTS), eos={eos})
    dropped = False
    with torch.inference_mode():
        for _ in range(6):
            decoder.step()
            dropped |= 0 not in decoder.live
            assert decoder.cache.layers[0].keys.shape[0] == decoder.drafter.cache.layers[0].keys.shape[0] == len(decoder.live)
            assert cache_length(decoder.cache) == max(decoder.lengths)
            for i, r in enumerate(decoder.live):
                sequence = PROMPTS[r] + decoder.outputs[r][:-1]  # every accepted token but the root
                assert decoder.lengths[i] == len(sequence) and decoder.roots[i] == decoder.outputs[r][-1]
                fresh = DynamicCache()
                target(input_ids=torch.tensor([sequence]), cache=fresh, use_cache=True)
                for (k, v), (k2, v2) in zip(_layers(decoder.cache), _layers(fresh)):
                    torch.testing.assert_close(k[i: i + 1, :, : len(sequence)], k2, atol=1e-5, rtol=1e-4)
                    torch.testing.assert_close(v[i: i + 1, :, : len(sequence)], v2, atol=1e-5, rtol=1e-4)
                # the draft's cache: every accepted token but the root and those it has not seen yet
                seen = sequence[: len(sequence) - len(decoder.drafter.pending[i])]
                assert decoder.drafter.committed[i] == len(seen)
                fresh = DynamicCache()
                draft(input_ids=torch.tensor([seen]), cache=fresh, use_cache=True)
                for (k, v), (k2, v2) in zip(_layers(decoder.drafter.cache), _layers(fresh)):
                    torch.testing.assert_close(k[i: i + 1, :, : len(seen)], k2, atol=1e-5, rtol=1e-4)
                    torch.testing.assert_close(v[i: i + 1, :, : len(seen)], v2, atol=1e-5, rtol=1e-4)
    assert dropped, "row 0 should have hit EOS and left the batch"


@pytest.mark.parametrize("kind", ["lm", "eagle"])
def test_batched_drafter_equals_single_drafters(kind):
    """A drafter of B rows gives each row the draft logits a one-row drafter gives it (through observe, new roots
    and dropped rows): padding and masks keep rows apart."""
    target = tiny_model("llama", seed=0, sharpness=1.0)
    prompts = [[5, 9, 13, 2, 7], [11], [3, 4]]
    hidden = target.config.hidden_size
    gen = torch.Generator().manual_seed(0)
    if kind == "lm":
        draft = tiny_model("llama", seed=1, layers=1, sharpness=1.0)
        batch, singles = CausalLMDrafter(draft, 64), [OneRow(CausalLMDrafter(draft, 64)) for _ in prompts]
        prefix = None
    else:
        draft = eagle_head(target)
        batch, singles = EagleDrafter(draft, target, 64), [OneRow(EagleDrafter(draft, target, 64)) for _ in prompts]
        prefix = torch.randn(len(prompts), 4, hidden, generator=gen)

    def close(a, b):
        finite = torch.isfinite(b)
        assert torch.equal(finite, torch.isfinite(a))
        torch.testing.assert_close(a[finite], b[finite], atol=2e-5, rtol=1e-4)

    def one_step(rows, roots, levels, accepted):
        """levels[l][i]: row i's (nodes, tokens, parents) at level l; accepted[i]: (nodes, tokens, bonus)."""
        got = batch.root_logits(roots)
        for i, r in enumerate(rows):
            close(got[i], singles[r].root_logits(roots[i]))
        for level in levels:
            got = batch.node_logits(level)
            for i, r in enumerate(rows):
                if level[i] and level[i][0]:
                    close(got[i], singles[r].node_logits(*level[i]))
        outcomes = []
        for i, (nodes, tokens, bonus) in enumerate(accepted):
            features = torch.randn(len(nodes), hidden, generator=gen) if kind == "eagle" else None
            outcomes.append(StepOutcome(nodes, (roots[i], *tokens), bonus, features))
        batch.observe(outcomes)
        for i, r in enumerate(rows):
            singles[r].observe(outcomes[i])

    with torch.inference_mode():
        batch.reset(prompts, prefix)
        for b, (prompt, single) in enumerate(zip(prompts, singles)):
            single.reset(prompt, prefix[b, : len(prompt) - 1] if prefix is not None else None)
        # row 0 accepts nodes 1, 3 (both forwarded); row 1 a node never forwarded (9); row 2 only its bonus
        one_step([0, 1, 2], [7, 11, 4],
                 [[([1, 2], [20, 21], [0, 0]), ([1], [22], [0]), ([], [], [])],
                  [([3], [30], [1]), ([2, 3], [31, 32], [1, 1]), None]],
                 [((0, 1, 3), (20, 30), 40), ((0, 1, 9), (22, 33), 41), ((0,), (), 42)])
        one_step([0, 1, 2], [40, 41, 42], [[([1], [23], [0]), ([1, 2, 3], [24, 25, 26], [0, 0, 0]), ([1], [27], [0])]],
                 [((0,), (), 43), ((0, 3), (26,), 44), ((0, 1), (27,), 45)])
        batch.select([2, 0])  # row 1 finished
        one_step([2, 0], [45, 43], [[([1], [28], [0]), ([1, 2], [29, 30], [0, 0])], [None, ([3], [31], [2])]],
                 [((0, 1), (28,), 46), ((0, 2, 3), (30, 31), 47)])
        got = batch.root_logits([46, 47])
        for i, r in enumerate([2, 0]):
            close(got[i], singles[r].root_logits([46, 47][i]))


def test_requests_that_cannot_be_batched_are_refused(llama_pair):
    target, draft = llama_pair
    with pytest.raises(ConfigError, match="non-empty"):
        treespec.generate_batch(target, draft, [], tree=policies.Chain(2), max_new_tokens=4)
    with pytest.raises(ConfigError, match="empty"):
        treespec.generate_batch(target, draft, [[1, 2], []], tree=policies.Chain(2), max_new_tokens=4)
    with pytest.raises(ConfigError, match="3 seeds for 2 prompts"):
        treespec.generate_batch(target, draft, [[1], [2]], tree=policies.Chain(2), max_new_tokens=4, seed=[1, 2, 3])
    with pytest.raises(ConfigError, match="must be a TreeShape"):
        treespec.generate_batch(target, draft, [[1]], tree="chain", max_new_tokens=4)


# --- losslessness per row: exact distribution of the first two tokens (or an EOS first) by enumeration ---

V = 8
LOSSLESS_PROMPTS = [[1, 4, 2], [5], [3, 3, 6, 1, 7]]
EOS = 3
RUNS = 1200


@pytest.fixture(scope="module")
def small_pair():
    return (tiny_model("llama", seed=10, vocab=V, hidden=16, layers=1, sharpness=6.0),
            tiny_model("llama", seed=11, vocab=V, hidden=16, layers=1, sharpness=4.0))


def exact_outcomes(target, prompt, sampling: SamplingConfig) -> np.ndarray:
    """[V, V + 1]: P(x1, x2) for x1 != EOS, and P(x1 = EOS) in column V (generation stops there)."""
    with torch.no_grad():
        first = probabilities(target(torch.tensor([prompt])).logits[0, -1], sampling).double()
        second = probabilities(target(torch.tensor([prompt + [x] for x in range(V)])).logits[:, -1], sampling).double()
    table = torch.zeros(V, V + 1, dtype=torch.float64)
    table[:, :V] = first[:, None] * second
    table[EOS] = 0
    table[EOS, V] = first[EOS]
    return table.numpy()


def chi2_pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    """Chi-square over cells with expected count >= 5; the rest pooled into one cell."""
    counts, expected = counts.ravel(), probs.ravel() / probs.sum() * counts.sum()
    assert counts[expected == 0].sum() == 0, "emitted a sequence the target gives probability 0"
    big = expected >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    keep = exp > 0
    return stats.chisquare(obs[keep], exp[keep]).pvalue


LOSSLESS_CASES = {
    "sequoia": policies.KAry([3, 2]),
    "dynamic": policies.Dynamic(budget=7, depth=3, topk=3),
    "adaptive": policies.Adaptive(max_depth=3, threshold=0.05, width=2),
}


@pytest.mark.parametrize("name", list(LOSSLESS_CASES))
def test_batched_sampling_is_lossless_per_row(small_pair, name):
    target, draft = small_pair
    sampling = SamplingConfig(0.8, 0.9)
    counts = np.zeros((len(LOSSLESS_PROMPTS), V, V + 1))
    accepted = 0
    for run in range(RUNS):
        outs = treespec.generate_batch(target, draft, LOSSLESS_PROMPTS, tree=LOSSLESS_CASES[name], max_new_tokens=3,
                                       temperature=sampling.temperature, top_p=sampling.top_p, eos_token_id=EOS,
                                       seed=run * len(LOSSLESS_PROMPTS))
        for b, out in enumerate(outs):
            counts[b, out.tokens[0], V if out.tokens[0] == EOS else out.tokens[1]] += 1
            accepted += out.steps[0].accepted - 1
    assert accepted > 0.2 * RUNS * len(LOSSLESS_PROMPTS), "the test needs drafts that are often accepted"
    assert counts[:, EOS, V].min() > 20, "some rows should stop at EOS while others continue"
    for b, prompt in enumerate(LOSSLESS_PROMPTS):
        assert chi2_pvalue(counts[b], exact_outcomes(target, prompt, sampling)) > 1e-3, f"row {b}"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_batched_rows_on_the_gpu():
    target = tiny_model("llama", seed=0).cuda()
    for draft in (noisy_copy(target, 0.3, seed=5), eagle_head(target).cuda()):
        _same_as_single(target, draft, PROMPTS, TREES["kary"], max_new_tokens=16)
        _same_as_single(target, draft, PROMPTS, TREES["dynamic"], max_new_tokens=16, temperature=0.8, seed=3)
    half, half_draft = copy.deepcopy(target).to(torch.bfloat16), noisy_copy(target, 0.3, seed=5).to(torch.bfloat16)
    outs = treespec.generate_batch(half, half_draft, PROMPTS, tree=TREES["kary"], max_new_tokens=16, temperature=0.7,
                                   top_p=0.9, seed=0)
    assert [len(o.tokens) for o in outs] == [16] * len(PROMPTS) and all(0 <= t < 64 for o in outs for t in o.tokens)
