"""Lookahead decoding: an n-gram pool filled from the target's own Jacobi guesses, made inside the verification pass.

Each row keeps a *window* of W guessed tokens for the positions after its root, g_1..g_W, and a *pool* of n-grams.
A step's tree carries the window as a chain below the root (root -> g_1 -> ... -> g_W, source "jacobi") next to
the pool's continuations of the root (source "lookahead"); one target pass scores both. The target's greedy token
y_i at window node i is its guess for the position after g_i, given the guessed text before it: one Jacobi
iteration. After the step the row has emitted A tokens (accepted drafts + bonus) and the window moves with it:
g'_k = y_{A+k-1}, a guess made one iteration further (slots past the old window's end are refilled, `_refill`).
Each y_i closes an n-gram along its diagonal (Fu et al. 2024): the tokens that preceded g_i in the iterations that
produced it (its *trail*), then g_i, then y_i; every such n-gram of N tokens enters the pool under its first
token, most recent first, at most `pool_size` per first token. To propose, the pool's n-grams that start with the
root give continuations of N - 1 tokens.

Under sampling the window still takes the target's argmax (its guesses need not be draws). Every node is a
candidate without a distribution, verified with the deterministic rule: lossless whatever the window and the pool
hold (docs/algorithms.md). The window costs W target rows per step and no draft pass; `window_wanted` prices them
(see `Lookahead` in treespec.drafters.sources). With `prompt_lookup`, the row's own text is searched as well
(treespec.drafters.ngram): the two model-free sources in one trie.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from treespec.decode.engine import StepOutcome
from treespec.drafters.ngram import Candidates, NGramDrafter, NGramIndex, build_trie, graft
from treespec.errors import ConfigError

WINDOW_SOURCES = frozenset({"lookahead", "jacobi"})  # the nodes the window pays for (the pool exists through it)


def _tail(tokens: tuple[int, ...], n: int) -> tuple[int, ...]:
    return tokens[len(tokens) - n:] if n > 0 else ()


class JacobiRow:
    """One row's window (guesses with their trails) and n-gram pool."""

    def __init__(self, text: NGramIndex, window: int, ngram: int, pool_size: int):
        self.ngram, self.pool_size = ngram, pool_size
        self.pool: dict[int, list[tuple[int, ...]]] = {}  # first token -> the rest of its n-grams, most recent first
        self.window: list[int] = []
        self.trails: list[tuple[int, ...]] = []
        self._refill(text, text.tokens[-1], window)
        self.window_steps = 0  # steps whose tree carried the window
        self.window_tokens = 0  # tokens those steps emitted (bonus included) ...
        self.window_gain = 0  # ... and those of them accepted through the window's sources
        self.idle_steps = 0  # steps since the window last ran

    def _guess(self, text: NGramIndex, previous: int) -> int:
        """A guess for the token after `previous`: the pool's newest n-gram from it, else what followed it last in
        the row's text, else `previous` again."""
        if self.pool.get(previous):
            return self.pool[previous][0][0]
        ends = text.ends.get((previous,), ()) if text.min_ngram <= 1 else ()
        follow = next((text.tokens[e + 1] for e in reversed(ends) if e + 1 < len(text.tokens)), None)
        return previous if follow is None else follow

    def _refill(self, text: NGramIndex, previous: int, width: int) -> None:
        """Extend the window to `width` guesses (fresh guesses have empty trails)."""
        while len(self.window) < width:
            previous = self._guess(text, self.window[-1] if self.window else previous)
            self.window.append(previous)
            self.trails.append(())

    def add(self, gram: tuple[int, ...]) -> None:
        continuations = self.pool.setdefault(gram[0], [])
        rest = gram[1:]
        if rest in continuations:
            continuations.remove(rest)
        continuations.insert(0, rest)
        del continuations[self.pool_size:]

    def update(self, outputs: Sequence[int | None], emitted: int, text: NGramIndex) -> None:
        """outputs[i]: the target's greedy token at window node i + 1 (None where the window was not in the tree);
        `emitted`: the tokens the step added; `text`: the row's text, already ending with the new root."""
        width = len(self.window)
        guesses: dict[int, tuple[int, tuple[int, ...]]] = {}  # window index -> (y, its trail)
        for i, (guess, trail, y) in enumerate(zip(self.window, self.trails, outputs)):
            if y is None:
                continue
            gram = trail + (guess, int(y))
            if len(gram) >= self.ngram:
                self.add(gram[len(gram) - self.ngram:])
            guesses[i] = (int(y), _tail(trail + (guess,), self.ngram - 2))
        # y at window index i guesses the position i + 2 after the old root; the new root sits `emitted` further
        moved = [guesses.get(emitted + k - 1) for k in range(width)]
        self.window, self.trails = [], []
        for guess in moved:
            if guess is None:
                break
            self.window.append(guess[0])
            self.trails.append(guess[1])
        self._refill(text, text.tokens[-1], width)


class LookaheadDrafter(NGramDrafter):
    """Lookahead decoding over B rows (see the module docstring): a `Drafter` without logits, like prompt lookup."""

    wants_target_argmax = True  # the engine hands `observe` the target's greedy token at every tree node

    def __init__(self, window: int = 4, ngram: int = 4, pool_size: int = 8, prompt_lookup: bool = False,
                 max_ngram: int = 4, min_ngram: int = 1, max_matches: int = 16):
        super().__init__(max_ngram, min_ngram, max_matches)
        if window < 1 or ngram < 2 or pool_size < 1:
            raise ConfigError(f"lookahead needs window >= 1, ngram >= 2 and pool_size >= 1, got {window}, {ngram}, "
                              f"{pool_size}")
        self.window, self.ngram, self.pool_size, self.prompt_lookup = window, ngram, pool_size, prompt_lookup
        self.jacobi: list[JacobiRow] = []

    def reset(self, prompts: Sequence[Sequence[int]], prefix_features: torch.Tensor | None = None) -> None:
        super().reset(prompts, prefix_features)
        self.jacobi = [JacobiRow(text, self.window, self.ngram, self.pool_size) for text in self.rows]

    def propose(self, roots: Sequence[int], budget: int, depths: Sequence[int], cost=None,
                probe: int = 8) -> list[Candidates]:
        """Each row's trie: the pool's (and, with prompt lookup, the text's) continuations of its root, at most
        `budget` nodes and depths[b] levels (root included), plus the window's chain, cut to the depth, not to the
        budget: in every row without a `cost`, else where its rows pay, the step priced by cost(nodes)
        (`window_wanted`, probed every `probe` steps)."""
        out = []
        for b, (text, row, root, depth) in enumerate(zip(self.rows, self.jacobi, roots, depths)):
            if text.tokens[-1] != int(root):
                raise ValueError("the lookahead drafter's text does not end with the row's root")
            found = []
            if depth > 1:
                if self.prompt_lookup and budget > 1:
                    found = [(k, follow, "ngram") for k, follow in text.continuations(depth - 1, self.max_matches)]
                found += [(1, rest[: depth - 1], "lookahead") for rest in row.pool.get(int(root), ())]
            trie = build_trie(root, found, budget)
            if depth > 1:
                grafted = graft(trie, row.window[: depth - 1], "jacobi")
                if cost is None or self.window_wanted(b, cost(len(grafted.tokens)), cost(len(trie.tokens)), probe):
                    trie = grafted
            out.append(trie)
        return out

    def window_wanted(self, b: int, cost_with: float, cost_without: float, probe: int) -> bool:
        """Whether row b's tree should carry the window, its step costing `cost_with` with the window's rows and
        `cost_without` without them: when the tokens it measurably brings per step (accepted through "lookahead"
        and "jacobi" nodes while it ran) pay for those rows at the speed of the step without them, or when it has
        not run for `probe` steps (the pool would go stale) or never."""
        row = self.jacobi[b]
        if row.window_steps == 0 or row.idle_steps >= probe:
            return True
        gain = row.window_gain / row.window_steps
        rest = (row.window_tokens - row.window_gain) / row.window_steps  # tokens per step without the window
        return gain * cost_without >= rest * max(cost_with - cost_without, 0.0)

    def observe(self, outcomes: Sequence[StepOutcome]) -> None:
        """As prompt lookup's (the noted trees counted, the text extended to the next root), then each row's window
        moved and its pool fed (the window's nodes are found in the noted tree by their tokens)."""
        super().observe(outcomes)
        for b, (text, row, outcome) in enumerate(zip(self.rows, self.jacobi, outcomes)):
            tree = self._trees[b] if b < len(self._trees) else None
            outputs: list[int | None] = [None] * len(row.window)
            if tree is not None:
                if outcome.target_argmax is None:
                    raise ValueError("LookaheadDrafter needs the target's greedy tokens at the tree's nodes")
                for i, node in enumerate(tree.token_path([0, *row.window])[1:]):  # the window's chain, as far as
                    if "jacobi" not in tree.sources[node].split("+"):  # the tree carried it
                        break
                    outputs[i] = outcome.target_argmax[node]
                ran = outputs[0] is not None
                if ran:
                    path = tree.token_path(outcome.accepted_tokens)
                    row.window_steps += 1
                    row.window_tokens += len(outcome.accepted_tokens)
                    row.window_gain += sum(bool(WINDOW_SOURCES & set(tree.sources[n].split("+"))) for n in path[1:])
                row.idle_steps = 0 if ran else row.idle_steps + 1
            row.update(outputs, len(outcome.accepted_tokens), text)
        self._trees = []

    def select(self, rows: Sequence[int]) -> None:
        super().select(rows)
        self.jacobi = [self.jacobi[r] for r in rows]
