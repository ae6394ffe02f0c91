"""A large, diverse, offline pool of chat-assistant user prompts for self-distillation.

Contract
--------
`build_prompt_pool(n, seed)` returns `n` distinct `PoolPrompt`s. The same `(n, seed)` always gives the
same list (order included); another seed gives another sample in another order. Prompts are split as
evenly as capacity allows over `CATEGORIES` (MT-Bench's eight categories, everyday "chat" and
HumanEval-style "code_completion", so coding plus code completion make up about 20%), and inside a
category evenly over its prompt families. Asking for more prompts than the templates can make
(`pool_capacity()`) raises ValueError.
`followup(category, pool_index, seed)` gives a prompt's second user turn (asked after the target's own first
answer, for the corpus's multi-turn part), a seeded choice from the general and the category's follow-ups.

Everything is built from hand-written lists, kept as data in `prompt_templates.yaml` next to this module
(read once, on first use); the families below wire them into templates: a family is one template plus the
lists that fill its slots. Enumerated slots (topics, names, styles...) make a prompt's identity, and every distinct
combination gives distinct text, so the capacity is the sum over families of the products of slot
sizes. Names, dates, amounts and numbers that only decorate a prompt are drawn from the seeded
`random.Random`. Nothing is taken from MT-Bench or HumanEval; `ngram_overlaps` is the check used to keep
it that way (no shared lower-cased 8-word sequence with either set, and no HumanEval function name).
Standard library and PyYAML only, no network. The code-completion specs stay in Python: their examples are
computed by reference implementations.
"""

from __future__ import annotations

import calendar
import datetime
import functools
import itertools
import math
import os
import random
import re
import string
import textwrap
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import yaml

CATEGORIES: tuple[str, ...] = (
    "writing", "roleplay", "reasoning", "math", "coding",
    "extraction", "stem", "humanities", "chat", "code_completion",
)


@dataclass(frozen=True)
class PoolPrompt:
    text: str
    category: str


# ----------------------------------------------------------------------------------------------------
# The hand-written lists: prompt_templates.yaml (package data next to this module)
# ----------------------------------------------------------------------------------------------------

TEMPLATES_FILE = Path(__file__).with_name("prompt_templates.yaml")


def _frozen(value: object) -> object:
    """YAML lists -> tuples, recursively: slot values stay immutable and hashable, as when they were Python."""
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return {key: _frozen(v) for key, v in value.items()}
    return value


@functools.lru_cache(maxsize=1)
def _lists() -> SimpleNamespace:
    """Every list of prompt_templates.yaml by its key (read once), plus the ones derived from them:
    `extraction_kinds` as (paragraph, slot, values, nums, instructions) with `values` resolved by name,
    `persona_names`, `persona_asks` ((persona, question) pairs), `advisor_cases` ((advisor, case) pairs) and
    `followups` as (category or "general", follow-ups) pairs."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    data = {key: _frozen(value) for key, value in yaml.load(TEMPLATES_FILE.read_text(encoding="utf-8"), Loader=loader).items()}
    data["extraction_kinds"] = tuple((kind["paragraph"], kind["slot"], data[kind["values"]], kind["nums"], kind["instructions"])
                                     for kind in data["extraction_kinds"])
    data["persona_names"] = tuple(persona for persona, _ in data["personas"])
    data["persona_asks"] = tuple((persona, ask) for persona, asks in data["personas"] for ask in asks)
    data["advisor_cases"] = tuple((role, case) for role, cases in data["advisors"] for case in cases)
    data["followups"] = tuple(data["followups"].items())  # (category or "general", follow-ups) pairs
    return SimpleNamespace(**data)


# ----------------------------------------------------------------------------------------------------
# Code completion: function specs with reference implementations (examples are computed, never typed)
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _FnSpec:
    name: str
    params: str
    returns: str
    doc: str
    impl: Callable[..., object]
    examples: tuple[tuple[object, ...], ...]


def _fn(name: str, params: str, returns: str, doc: str, impl: Callable[..., object],
        *examples: tuple) -> _FnSpec:
    return _FnSpec(name, params, returns, doc, impl, examples)


def _rotate_right(items: list, k: int) -> list:
    k = k % len(items) if items else 0
    return items[len(items) - k:] + items[:len(items) - k]


def _valid_ipv4(address: str) -> bool:
    parts = address.split(".")
    return len(parts) == 4 and all(p.isdigit() and str(int(p)) == p and int(p) <= 255 for p in parts)


def _max_subarray(values: list[int]) -> int:
    return max(sum(values[i:j]) for i in range(len(values)) for j in range(i + 1, len(values) + 1))


FUNCTIONS = (
    _fn("running_totals", "values: List[int]", "List[int]",
        "Return a list whose element i is the sum of values[0] through values[i].",
        lambda v: list(itertools.accumulate(v)), ([3, 1, 4, 1],), ([],)),
    _fn("count_words", "text: str", "int",
        "Count the words in text. Words are separated by any run of whitespace.",
        lambda s: len(s.split()), ("hello big world",), ("   ",)),
    _fn("capitalize_words", "text: str", "str",
        "Upper-case the first letter of every space-separated word in text and leave the other letters "
        "alone.",
        lambda s: " ".join(w[:1].upper() + w[1:] for w in s.split(" ")), ("the quick fox",), ("a bC",)),
    _fn("second_largest", "values: List[int]", "int",
        "Return the second largest distinct value. The list always holds at least two distinct values.",
        lambda v: sorted(set(v))[-2], ([4, 1, 4, 3],), ([10, 20],)),
    _fn("chunk_list", "items: List[int], size: int", "List[List[int]]",
        "Split items into consecutive pieces of length size; the final piece may be shorter.",
        lambda v, k: [v[i:i + k] for i in range(0, len(v), k)], ([1, 2, 3, 4, 5], 2), ([], 3)),
    _fn("merge_sorted_lists", "first: List[int], second: List[int]", "List[int]",
        "Combine two lists that are each in ascending order into a single ascending list.",
        lambda a, b: sorted(a + b), ([1, 4, 9], [2, 3, 10]), ([], [5])),
    _fn("is_anagram", "first: str, second: str", "bool",
        "Tell whether the two strings use exactly the same letters the same number of times, "
        "ignoring case and spaces.",
        lambda a, b: sorted(a.replace(" ", "").lower()) == sorted(b.replace(" ", "").lower()),
        ("Listen", "Silent"), ("apple", "paper")),
    _fn("reverse_word_order", "sentence: str", "str",
        "Return the sentence with its words in reverse order. Words are separated by single spaces.",
        lambda s: " ".join(reversed(s.split(" "))), ("one two three",), ("solo",)),
    _fn("count_vowel_letters", "text: str", "int",
        "Count the characters of text that are one of a, e, i, o, u, in either case.",
        lambda s: sum(c in "aeiou" for c in s.lower()), ("Programming",), ("rhythm",)),
    _fn("sum_of_digits", "number: int", "int",
        "Add up the decimal digits of a non-negative integer.",
        lambda n: sum(map(int, str(n))), (1234,), (0,)),
    _fn("digital_root", "number: int", "int",
        "Keep adding the digits of a non-negative integer until one digit is left, and return that digit.",
        lambda n: 0 if n == 0 else 1 + (n - 1) % 9, (9875,), (0,)),
    _fn("is_leap_year", "year: int", "bool",
        "Apply the Gregorian calendar rules: a year divisible by 4 is a leap year, except century years, "
        "which must be divisible by 400.",
        calendar.isleap, (2000,), (1900,), (2024,)),
    _fn("celsius_to_fahrenheit", "celsius: float", "float",
        "Convert a temperature in degrees Celsius to degrees Fahrenheit.",
        lambda c: c * 9 / 5 + 32, (100.0,), (-40.0,)),
    _fn("format_duration", "seconds: int", "str",
        "Format a non-negative number of seconds as H:MM:SS, with hours not padded.",
        lambda s: f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}", (3725,), (59,)),
    _fn("snake_to_camel", "identifier: str", "str",
        "Turn a snake_case identifier into camelCase.",
        lambda s: s.split("_")[0] + "".join(w.capitalize() for w in s.split("_")[1:]),
        ("max_retry_count",), ("value",)),
    _fn("camel_to_snake", "identifier: str", "str",
        "Turn a camelCase identifier into snake_case.",
        lambda s: "".join("_" + c.lower() if c.isupper() else c for c in s), ("parseHttpHeader",), ("id",)),
    _fn("run_length_encode", "text: str", "str",
        "Replace every run of a repeated character by the character followed by the length of the run.",
        lambda s: "".join(f"{k}{len(list(g))}" for k, g in itertools.groupby(s)), ("aaabcc",), ("",)),
    _fn("run_length_decode", "encoded: str", "str",
        "Undo run-length encoding: each character is followed by how many times it repeats.",
        lambda s: "".join(c * int(k) for c, k in re.findall(r"(\D)(\d+)", s)), ("a3b1c2",), ("x10",)),
    _fn("caesar_shift", "text: str, shift: int", "str",
        "Move each lowercase letter forward by shift places in the alphabet, wrapping from z back to a. "
        "Every other character is kept as it is.",
        lambda s, k: "".join(chr((ord(c) - 97 + k) % 26 + 97) if "a" <= c <= "z" else c for c in s),
        ("hello, world", 3), ("xyz", 2)),
    _fn("is_pangram", "sentence: str", "bool",
        "Tell whether the sentence contains every letter of the English alphabet at least once, ignoring "
        "case.",
        lambda s: set(string.ascii_lowercase) <= set(s.lower()),
        ("Pack my box with five dozen liquor jugs",), ("Hello there",)),
    _fn("longest_common_prefix", "words: List[str]", "str",
        "Return the longest string that every word in the list starts with.",
        os.path.commonprefix, (["flower", "flow", "flight"],), (["dog", "car"],)),
    _fn("most_frequent_value", "values: List[int]", "int",
        "Return the value that occurs most often in a non-empty list; on a tie, return the smallest such "
        "value.",
        lambda v: min(v, key=lambda x: (-v.count(x), x)), ([3, 1, 3, 2, 1],), ([7],)),
    _fn("flatten_once", "nested: List[List[int]]", "List[int]",
        "Join the inner lists into one list, keeping their order.",
        lambda n: [x for inner in n for x in inner], ([[1, 2], [], [3]],), ([],)),
    _fn("transpose_matrix", "matrix: List[List[int]]", "List[List[int]]",
        "Swap rows and columns of a rectangular matrix given as a list of rows.",
        lambda m: [list(r) for r in zip(*m)], ([[1, 2, 3], [4, 5, 6]],), ([[7]],)),
    _fn("rotate_right", "items: List[int], steps: int", "List[int]",
        "Shift the list to the right by steps positions; items falling off the end wrap around to the front.",
        _rotate_right, ([1, 2, 3, 4, 5], 2), ([1, 2, 3], 4), ([], 1)),
    _fn("two_sum_indices", "values: List[int], target: int", "Tuple[int, int]",
        "Return the index pair (i, j) with i < j and values[i] + values[j] == target, choosing the smallest "
        "i and then the smallest j. Such a pair always exists.",
        lambda v, t: next((i, j) for i in range(len(v)) for j in range(i + 1, len(v)) if v[i] + v[j] == t),
        ([2, 7, 11, 15], 9), ([3, 2, 4], 6)),
    _fn("find_missing_number", "values: List[int]", "int",
        "The list holds every integer from 1 to n exactly once except one of them, in any order. "
        "Return the one that is absent.",
        lambda v: (len(v) + 1) * (len(v) + 2) // 2 - sum(v), ([3, 1, 5, 2],), ([2],)),
    _fn("max_subarray_sum", "values: List[int]", "int",
        "Return the largest sum of a non-empty run of consecutive elements.",
        _max_subarray, ([-2, 1, -3, 4, -1, 2, 1, -5, 4],), ([-3, -1, -2],)),
    _fn("is_perfect_number", "number: int", "bool",
        "A perfect number equals the sum of its divisors smaller than itself. Tell whether number is one.",
        lambda n: n > 1 and sum(d for d in range(1, n) if n % d == 0) == n, (28,), (12,)),
    _fn("is_armstrong_number", "number: int", "bool",
        "Tell whether a non-negative integer equals the sum of its digits, each raised to the power of the "
        "number of digits.",
        lambda n: n == sum(int(d) ** len(str(n)) for d in str(n)), (153,), (154,)),
    _fn("primes_below", "limit: int", "List[int]",
        "List every prime number smaller than limit in increasing order.",
        lambda n: [p for p in range(2, n) if all(p % d for d in range(2, math.isqrt(p) + 1))], (12,), (2,)),
    _fn("least_common_multiple", "a: int, b: int", "int",
        "Return the smallest positive integer that both positive integers a and b divide.",
        lambda a, b: a * b // math.gcd(a, b), (4, 6), (7, 5)),
    _fn("tally_items", "items: List[str]", "Dict[str, int]",
        "Map each distinct item to how many times it occurs, in order of first appearance.",
        lambda v: dict(Counter(v)), (["a", "b", "a"],), ([],)),
    _fn("group_by_initial", "words: List[str]", "Dict[str, List[str]]",
        "Group non-empty words under their lower-cased first letter, keeping the original order in each "
        "group.",
        lambda ws: {k: [w for w in ws if w[0].lower() == k] for k in dict.fromkeys(w[0].lower() for w in ws)},
        (["apple", "Avocado", "banana"],), ([],)),
    _fn("invert_mapping", "mapping: Dict[str, int]", "Dict[int, List[str]]",
        "Build a dictionary from each value to the list of keys that had it, keys in insertion order.",
        lambda m: {v: [k for k in m if m[k] == v] for v in dict.fromkeys(m.values())},
        ({"x": 1, "y": 2, "z": 1},), ({},)),
    _fn("flatten_two_levels", "nested: Dict[str, Dict[str, int]]", "Dict[str, int]",
        "Turn a dictionary of dictionaries into one dictionary whose keys join the outer and inner key "
        "with a dot.",
        lambda n: {f"{o}.{i}": v for o, d in n.items() for i, v in d.items()},
        ({"a": {"x": 1, "y": 2}, "b": {"z": 3}},)),
    _fn("is_valid_ipv4", "address: str", "bool",
        "Tell whether address is four dot-separated decimal numbers from 0 to 255, with no leading zeros.",
        _valid_ipv4, ("192.168.0.1",), ("256.1.1.1",), ("1.2.3",), ("01.2.3.4",)),
    _fn("hamming_distance", "first: str, second: str", "int",
        "Count the positions at which two strings of equal length hold different characters.",
        lambda a, b: sum(x != y for x, y in zip(a, b)), ("karolin", "kathrin"), ("abc", "abc")),
    _fn("dedupe_keep_order", "items: List[int]", "List[int]",
        "Drop repeated values, keeping only the first occurrence of each, in their original order.",
        lambda v: list(dict.fromkeys(v)), ([3, 1, 3, 2, 1],), ([],)),
    _fn("interleave_lists", "first: List[int], second: List[int]", "List[int]",
        "Take elements alternately from first and second, starting with first; once one list runs out, "
        "append what remains of the other.",
        lambda a, b: [x for pair in itertools.zip_longest(a, b) for x in pair if x is not None],
        ([1, 2, 3], [10, 20]), ([], [4, 5])),
    _fn("clamp_values", "values: List[float], low: float, high: float", "List[float]",
        "Limit every value to the closed interval from low to high.",
        lambda v, lo, hi: [min(max(x, lo), hi) for x in v], ([-1.5, 0.5, 2.5], 0.0, 1.0)),
    _fn("normalize_spaces", "text: str", "str",
        "Strip leading and trailing whitespace and collapse every inner run of whitespace to one space.",
        lambda s: " ".join(s.split()), ("  too   many\tspaces here ",), ("",)),
    _fn("has_unique_letters", "word: str", "bool",
        "Tell whether no letter appears twice in word when case is ignored.",
        lambda w: len(set(w.lower())) == len(w), ("Machine",), ("letter",)),
    _fn("classify_characters", "text: str", "Dict[str, int]",
        "Count letters, digits and all other characters; return them under the keys 'letters', 'digits' "
        "and 'other'.",
        lambda s: {"letters": sum(c.isalpha() for c in s), "digits": sum(c.isdigit() for c in s),
                   "other": sum(not c.isalnum() for c in s)}, ("a1 b2!",)),
    _fn("matrix_trace", "matrix: List[List[int]]", "int",
        "Return the sum of the main diagonal of a square matrix.",
        lambda m: sum(m[i][i] for i in range(len(m))), ([[1, 2], [3, 4]],), ([[5]],)),
    _fn("dot_product", "first: List[int], second: List[int]", "int",
        "Multiply two equally long vectors element by element and add up the products.",
        lambda a, b: sum(x * y for x, y in zip(a, b)), ([1, 2, 3], [4, 5, 6]), ([], [])),
    _fn("window_averages", "values: List[float], window: int", "List[float]",
        "Return the average of every run of window consecutive values, from left to right.",
        lambda v, w: [sum(v[i:i + w]) / w for i in range(len(v) - w + 1)], ([2.0, 4.0, 6.0, 8.0], 3)),
    _fn("pascal_row", "row: int", "List[int]",
        "Return the given row of Pascal's triangle, where row 0 is [1].",
        lambda n: [math.comb(n, k) for k in range(n + 1)], (4,), (0,)),
    _fn("to_binary_string", "number: int", "str",
        "Write a non-negative integer in base 2, without any prefix.",
        lambda n: format(n, "b"), (10,), (0,)),
    _fn("parse_binary", "bits: str", "int",
        "Read a string of 0s and 1s as a base-2 number.",
        lambda s: int(s, 2), ("1010",), ("0",)),
    _fn("count_set_bits", "number: int", "int",
        "Return how many 1 bits appear in the binary form of a non-negative integer.",
        lambda n: n.bit_count(), (13,), (0,)),
    _fn("gcd_of_list", "values: List[int]", "int",
        "Return the largest positive integer that divides every value in a non-empty list of positive "
        "integers.",
        lambda v: functools.reduce(math.gcd, v), ([12, 18, 30],), ([7],)),
    _fn("multiply_all", "values: List[int]", "int",
        "Return the product of the values; the product of an empty list is 1.",
        math.prod, ([2, 3, 4],), ([],)),
    _fn("summary_stats", "values: List[float]", "Tuple[float, float, float]",
        "Return (minimum, maximum, arithmetic mean) of a non-empty list.",
        lambda v: (min(v), max(v), sum(v) / len(v)), ([2.0, 4.0, 9.0],)),
    _fn("truncate_words", "text: str, limit: int", "str",
        "Keep the first limit words of text, joined by single spaces, and append '...' if anything was cut.",
        lambda s, k: " ".join(s.split()[:k]) + ("..." if len(s.split()) > k else ""),
        ("one two three four", 2), ("short text", 5)),
    _fn("mask_card_number", "card: str", "str",
        "Hide all but the last four characters of a card number behind '*' characters.",
        lambda s: "*" * (len(s) - 4) + s[-4:], ("1234567812345678",), ("9876",)),
    _fn("name_initials", "full_name: str", "str",
        "Return the upper-case first letter of every word in full_name, each followed by a period.",
        lambda s: "".join(w[0].upper() + "." for w in s.split()), ("ada lovelace",),
        ("grace brewster hopper",)),
    _fn("map_word_lengths", "sentence: str", "Dict[str, int]",
        "Map every whitespace-separated word of the sentence to its length.",
        lambda s: {w: len(w) for w in s.split()}, ("red green blue",)),
    _fn("first_longest_word", "sentence: str", "str",
        "Return the longest word in a non-empty sentence; if several share that length, return the first "
        "one.",
        lambda s: max(s.split(), key=len), ("a bb ccc dd eee",)),
    _fn("is_sentence_palindrome", "text: str", "bool",
        "Tell whether text reads the same forwards and backwards once case, spaces and punctuation are "
        "ignored.",
        lambda s: [c.lower() for c in s if c.isalnum()] == [c.lower() for c in reversed(s) if c.isalnum()],
        ("Never odd or even",), ("Open a door",)),
    _fn("squares_of_evens", "values: List[int]", "List[int]",
        "Return the square of every even value, in the original order.",
        lambda v: [x * x for x in v if x % 2 == 0], ([1, 2, 3, 4],), ([5, 7],)),
    _fn("split_even_odd", "values: List[int]", "Tuple[List[int], List[int]]",
        "Separate the values into (evens, odds), each keeping the original order.",
        lambda v: ([x for x in v if x % 2 == 0], [x for x in v if x % 2]), ([5, 2, 8, 1],)),
    _fn("kth_smallest", "values: List[int], k: int", "int",
        "Return the k-th smallest value, counting from 1, of a list with at least k elements.",
        lambda v, k: sorted(v)[k - 1], ([7, 2, 9, 4], 2), ([5], 1)),
    _fn("overlap_length", "start_a: int, end_a: int, start_b: int, end_b: int", "int",
        "Return the length of the overlap of the half-open ranges [start_a, end_a) and [start_b, end_b), "
        "or 0 when they do not overlap.",
        lambda a0, a1, b0, b1: max(0, min(a1, b1) - max(a0, b0)), (1, 5, 3, 9), (0, 2, 4, 6)),
    _fn("days_in_month", "year: int, month: int", "int",
        "Return the number of days in the given month (1 to 12) of the given Gregorian year.",
        lambda y, m: calendar.monthrange(y, m)[1], (2024, 2), (2023, 4)),
    _fn("weekday_name", "year: int, month: int, day: int", "str",
        "Return the English name of the weekday that falls on the given date.",
        lambda y, m, d: calendar.day_name[datetime.date(y, m, d).weekday()], (2024, 1, 1), (2000, 2, 29)),
    _fn("average_word_length", "sentence: str", "float",
        "Return the mean length of the words in a non-empty sentence, rounded to two decimals.",
        lambda s: round(sum(map(len, s.split())) / len(s.split()), 2), ("the cat sat",), ("hi there",)),
    _fn("percentage_change", "old: float, new: float", "float",
        "Return the change from old to new as a percentage of old, rounded to two decimals.",
        lambda a, b: round((b - a) / a * 100, 2), (50.0, 75.0), (80.0, 60.0)),
    _fn("apply_discount", "price: float, percent: float", "float",
        "Return the price after taking percent off, rounded to cents.",
        lambda p, q: round(p * (1 - q / 100), 2), (80.0, 25.0), (19.99, 10.0)),
    _fn("compound_balance", "principal: float, rate: float, years: int", "float",
        "Return the balance after compounding principal once a year at rate percent for the given years, "
        "rounded to cents.",
        lambda p, r, y: round(p * (1 + r / 100) ** y, 2), (1000.0, 5.0, 2), (250.0, 0.0, 10)),
    _fn("vowel_positions", "word: str", "List[int]",
        "Return the indices of the characters in word that are vowels (a, e, i, o, u), ignoring case.",
        lambda w: [i for i, c in enumerate(w) if c.lower() in "aeiou"], ("banana",), ("Sky",)),
    _fn("strip_punctuation", "text: str", "str",
        "Delete every ASCII punctuation character from text.",
        lambda s: "".join(c for c in s if c not in string.punctuation), ("Hi, there! OK?",), ("plain",)),
    _fn("nth_triangular_number", "n: int", "int",
        "Return the n-th triangular number, the number of dots in a triangle with n rows.",
        lambda n: n * (n + 1) // 2, (4,), (1,)),
    _fn("is_power_of_two", "number: int", "bool",
        "Tell whether number equals 2 raised to some non-negative integer power.",
        lambda n: n > 0 and n & (n - 1) == 0, (64,), (96,), (1,)),
    _fn("zip_to_dict", "keys: List[str], values: List[int]", "Dict[str, int]",
        "Pair up keys and values of equal length into a dictionary.",
        lambda k, v: dict(zip(k, v)), (["a", "b"], [1, 2]), ([], [])),
    _fn("keep_long_words", "words: List[str], min_length: int", "List[str]",
        "Keep only the words whose length is at least min_length, in the original order.",
        lambda ws, k: [w for w in ws if len(w) >= k], (["hi", "hello", "hey"], 3)),
    _fn("sort_by_length", "words: List[str]", "List[str]",
        "Order the words from shortest to longest; words of equal length keep their relative order.",
        lambda ws: sorted(ws, key=len), (["pear", "fig", "banana"],), (["bb", "aa"],)),
    _fn("names_by_age", "people: List[Tuple[str, int]]", "List[str]",
        "Given (name, age) pairs, return the names from youngest to oldest, breaking ties alphabetically.",
        lambda ps: [n for n, a in sorted(ps, key=lambda p: (p[1], p[0]))],
        ([("Ana", 31), ("Bo", 25), ("Cy", 31)],)),
    _fn("find_all_indices", "items: List[int], target: int", "List[int]",
        "Return every index at which target occurs in items.",
        lambda v, t: [i for i, x in enumerate(v) if x == t], ([1, 3, 1, 2, 1], 1), ([4, 5], 9)),
    _fn("consecutive_differences", "values: List[int]", "List[int]",
        "Return each value minus the one before it, starting from the second value.",
        lambda v: [b - a for a, b in itertools.pairwise(v)], ([1, 4, 9, 16],), ([5],)),
    _fn("is_arithmetic_progression", "values: List[int]", "bool",
        "Tell whether the gap between neighbouring values is the same throughout the list.",
        lambda v: len({b - a for a, b in itertools.pairwise(v)}) <= 1, ([3, 7, 11, 15],), ([1, 2, 4],)),
    _fn("make_acronym", "phrase: str", "str",
        "Build an upper-case acronym from the first letter of each word; hyphens separate words too.",
        lambda s: "".join(w[0].upper() for w in s.replace("-", " ").split()),
        ("portable network graphics",), ("self-contained underwater breathing apparatus",)),
    _fn("left_pad", "text: str, width: int, fill: str", "str",
        "Pad text on the left with the single character fill until it is width characters long.",
        lambda s, w, f: s.rjust(w, f), ("42", 5, "0"), ("long", 2, "*")),
    _fn("count_nonempty_lines", "text: str", "int",
        "Count the lines of text that contain something other than whitespace.",
        lambda s: sum(1 for line in s.splitlines() if line.strip()), ("a\n\n b\n",), ("",)),
    _fn("every_other_item", "items: List[str]", "List[str]",
        "Return the items at positions 0, 2, 4 and so on.",
        lambda v: v[::2], (["a", "b", "c", "d", "e"],), ([],)),
    _fn("sum_multiples_of_3_or_5", "limit: int", "int",
        "Add up all positive integers below limit that are divisible by 3 or by 5.",
        lambda n: sum(x for x in range(n) if x % 3 == 0 or x % 5 == 0), (10,), (1,)),
    _fn("is_non_decreasing", "values: List[int]", "bool",
        "Tell whether each value is at least as large as the one before it.",
        lambda v: all(a <= b for a, b in itertools.pairwise(v)), ([1, 2, 2, 5],), ([3, 1],)),
    _fn("count_distinct_words", "sentence: str", "int",
        "Count how many different words the sentence uses, ignoring case.",
        lambda s: len({w.lower() for w in s.split()}), ("The cat saw the dog",), ("",)),
)


# ----------------------------------------------------------------------------------------------------
# Families
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Family:
    """One template. `slots` are enumerated (they decide the prompt's identity and the capacity); `nums` are
    random integers; `extra(rng, values)` computes further fields from the chosen ones."""

    template: str
    slots: tuple[tuple[str, Sequence[object]], ...]
    nums: tuple[tuple[str, tuple[int, int]], ...] = ()
    extra: Callable[[random.Random, dict], dict] | None = None

    @property
    def size(self) -> int:
        return math.prod(len(values) for _, values in self.slots)


def _fam(template: str, nums: dict | None = None, extra: Callable | None = None,
         **slots: Sequence[object]) -> _Family:
    return _Family(template, tuple(slots.items()), tuple((nums or {}).items()), extra)


def _join_seq(terms: Sequence[int]) -> dict:
    return {"seq": ", ".join(map(str, terms))}


def _fib_like(a: int, b: int) -> list[int]:
    terms = [a, b]
    while len(terms) < 6:
        terms.append(terms[-1] + terms[-2])
    return terms


def _quadratic_from_roots(rng: random.Random, _: dict) -> dict:
    low, high = rng.randint(1, 9), rng.randint(10, 15)
    return {"s": low + high, "p": low * high}


def _coprime_jugs(rng: random.Random, _: dict) -> dict:
    a = rng.randint(3, 8)
    b = rng.choice([x for x in range(a + 1, 14) if math.gcd(a, x) == 1])
    return {"a": a, "b": b, "c": rng.choice([x for x in range(1, b) if x != a])}


def _writing() -> list[_Family]:
    L = _lists()
    x = L.writing_extras
    return [
        _fam("Write a lively travel blog post about {duration} in {place}, focusing on {focus}.{x}",
             duration=L.durations, place=L.places, focus=L.travel_focus, x=x),
        _fam("Draft a {tone} email to {case[0]} {case[1]}.{x}", tone=L.email_tones, case=L.email_cases, x=x),
        _fam("Write a short story about {who} who {event}.{x}", who=L.characters, event=L.events, x=L.story_extras),
        _fam("Write a {form} about {subject}.{x}", form=L.poem_forms, subject=L.poem_subjects, x=L.poem_extras),
        _fam("Write a product description for {product}, aimed at {audience}.{x}",
             product=L.products, audience=L.audiences, x=x),
        _fam("Write a {length} speech for {occasion}.{x}", length=L.speech_lengths, occasion=L.occasions, x=x),
        _fam("Write a persuasive {piece} arguing that {claim}.{x}", piece=L.pieces, claim=L.claims, x=x),
        _fam("Write a cover letter for a {job} position. The applicant {exp}.{x}", job=L.jobs, exp=L.experience,
             x=x),
        _fam('Rewrite this sentence so that it sounds more {tone}: "{sentence}"',
             tone=L.rewrite_tones, sentence=L.blunt_sentences),
        _fam("Create an outline for a blog post comparing {pair[0]} and {pair[1]}, with a heading and a "
             "one-line summary for each section.{x}", pair=L.compare_pairs, x=x),
        _fam("Describe {scene} using vivid sensory details: sights, sounds, smells and textures.{x}",
             scene=L.scenes, x=x),
        _fam("Come up with {k} catchy slogans for {business}.{x}", k=L.count_words, business=L.businesses,
             x=("", " Keep each one under eight words.", " Make at least one of them a pun.")),
        _fam("I run {business} in {city}. {situation} Please write {piece}.{x}",
             business=L.businesses, city=L.cities, situation=L.brief_situations, piece=L.brief_pieces, x=x),
        _fam("Write a blog post about {topic} for {audience}.{x}", topic=L.general_topics, audience=L.audiences,
             x=x),
    ]


def _roleplay() -> list[_Family]:
    L = _lists()
    x = L.role_extras
    return [
        _fam("Imagine you are {pa[0]}. {pa[1]}{x}", pa=L.persona_asks, x=x),
        _fam("Act as {pa[0]} and stay in that role for this conversation. My first question: {pa[1]}{x}",
             pa=L.persona_asks, x=x),
        _fam('You are {pa[0]}. {visitor} asks you: "{pa[1]}" How do you reply?{x}',
             pa=L.persona_asks, visitor=tuple(v[0].upper() + v[1:] for v in L.role_visitors), x=x),
        _fam("Pretend you are {persona} and write a diary entry about {day}.{x}",
             persona=L.persona_names, day=L.diary_days, x=x),
        _fam("Let's role-play. You are {sc[0]} and I am {sc[1]}.{goal} Please start the conversation.",
             sc=L.role_scenarios, goal=L.role_goals),
        _fam("I'd like to rehearse a conversation. Play {sc[0]}; I'll be {sc[1]}.{goal} Stay in your role "
             "and wait for my replies.", sc=L.role_scenarios, goal=L.role_goals),
        _fam("Take on the role of {case[0]}. I will describe my situation and you will give me practical "
             "advice. My situation: {case[1]}{x}", case=L.advisor_cases, x=x),
    ]


def _reasoning() -> list[_Family]:
    L = _lists()
    names = L.names
    families = [
        _fam("{name}, {p1}, {p2} and {p3} are friends. {name} is {t[0]} than {p1} but not as {t[1]} as {p3}, "
             "and {p2} is the {t[2]} of the four. Who is the {t[3]}? Put all four in order.", name=names,
             t=L.traits),
        _fam("In a {contest}, {name} scored more points than {p1}, and {p2} scored fewer points than {p1} "
             "but more than {p3}. Who came second, and who came last?", name=names, contest=L.contests),
        _fam("{name} is {p1}'s {r1}, and {p1} is {p2}'s {r2}. What is the relationship between {name} and "
             "{p2}? Explain your reasoning and mention any ambiguity.", name=names, r1=L.relations_a,
             r2=L.relations_b),
        _fam("All {t[0]} are {t[1]}, and all {t[1]} are {t[2]}. Is it necessarily true that all {t[0]} are "
             "{t[2]}? Explain.", t=L.syllogism_terms),
        _fam("All {t[0]} are {t[1]}. Some {t[1]} are {t[2]}. Can we conclude that some {t[0]} are {t[2]}? "
             "Justify your answer.", t=L.syllogism_terms),
        _fam("Suppose that no {t[0]} are {t[1]}, and that some {t[2]} are {t[0]}. What, if anything, follows "
             "about {t[2]} and {t[1]}?", t=L.syllogism_terms),
        _fam("Statement one: some {t[1]} are {t[0]}. Statement two: no {t[0]} are {t[2]}. Statement three: "
             "some {t[1]} are not {t[2]}. If the first two statements are true, is the third true, false or "
             "uncertain?", t=L.syllogism_terms),
        _fam("{frame[0]}{seq}{frame[1]}", frame=L.sequence_frames, start=range(1, 31), step=range(2, 13),
             extra=lambda rng, v: _join_seq([v["start"] + i * v["step"] for i in range(5)])),
        _fam("{frame[0]}{seq}{frame[1]}", frame=L.sequence_frames, start=range(1, 10), ratio=range(2, 5),
             extra=lambda rng, v: _join_seq([v["start"] * v["ratio"] ** i for i in range(5)])),
        _fam("{frame[0]}{seq}{frame[1]}", frame=L.sequence_frames, a=range(1, 10), b=range(1, 10),
             extra=lambda rng, v: _join_seq(_fib_like(v["a"], v["b"]))),
        _fam("{frame[0]}{seq}{frame[1]}", frame=L.sequence_frames, c=range(25),
             extra=lambda rng, v: _join_seq([i * i + v["c"] for i in range(1, 6)])),
        _fam("{frame[0]}{seq}{frame[1]}", frame=L.sequence_frames, up=range(4, 12), down=range(1, 4),
             extra=lambda rng, v: _join_seq(list(itertools.accumulate(
                 [rng.randint(1, 20)] + [v["up"] if i % 2 == 0 else -v["down"] for i in range(6)])))),
        _fam("If {a} days ago was a {day}, what day of the week will it be {b} days from today?",
             a=range(2, 60), day=L.weekdays, nums={"b": (3, 200)}),
        _fam("Today is {day}. What day of the week will it be in {a} days, and what day was it {b} days ago?",
             day=L.weekdays, a=range(10, 400), nums={"b": (5, 100)}),
        _fam("On an island, knights always tell the truth and knaves always lie. {name} says, \"{p1} and I "
             "are both knaves.\" What are {name} and {p1}?", name=names),
        _fam("Every islander is either a knight, who always tells the truth, or a knave, who always lies. "
             "{name} says, \"{p1} is a knave.\" {p1} says, \"{name} and I are the same kind.\" Who is a "
             "knight and who is a knave?", name=names),
        _fam("{name}, {p1} and {p2} are each a knight (always truthful) or a knave (always lying). {name} "
             "says, \"Exactly one of us is a knave.\" {p1} says, \"{name} is lying.\" {p2} stays silent. "
             "What can you conclude about each of them?", name=names),
        _fam("{frame[0]}{words}{frame[1]}", frame=L.odd_frames, group=L.odd_one_out,
             extra=lambda rng, v: {"words": ", ".join(rng.sample(v["group"], len(v["group"])))}),
        _fam("{name}, {p1} and {p2} each picked a different {kind[0]} from this list: {kind[1]}, {kind[2]}, "
             "{kind[3]}. {name} did not pick {kind[1]}, and {p2} picked {kind[2]}. Who picked which "
             "{kind[0]}?",
             name=names, kind=L.pick_kinds),
        _fam("What is the angle between the hour hand and the minute hand of a clock at {h}:{m:02d}?",
             h=range(1, 13), m=range(0, 60, 5)),
        _fam("At {h}:{m:02d}, what is the smaller angle formed by the two hands of an analog clock? Show "
             "your calculation.", h=range(1, 13), m=range(0, 60, 5)),
        _fam("You have {n} {things} that look identical, but one is slightly heavier than the others. Using "
             "a two-pan balance, what is the smallest number of weighings that always finds the heavy one?",
             n=range(3, 100), things=L.weigh_things),
        _fam("{name} leaves home and walks {a} meters {d}, turns {t1} and walks {b} meters, then turns {t2} "
             "and walks {c} meters. Which way is {name} facing now, and how far is {name} from home in a "
             "straight line?", name=names, d=L.directions, t1=L.turns, t2=L.turns,
             nums={"a": (100, 900), "b": (100, 900), "c": (100, 900)}),
        _fam("At a {event} with {n} people, everyone shakes hands with everyone else exactly once. How many "
             "handshakes take place?", event=L.gatherings, n=range(4, 61)),
        _fam("In a {sport} league, each of {n} teams plays every other team exactly once. How many games are "
             "played? How many if every pair meets twice?", sport=L.league_sports, n=range(4, 33)),
        _fam("{name} has a {a}-liter {cup} and a {b}-liter {cup}, and unlimited water. How can {name} "
             "measure exactly {c} liters? List the steps.", name=names, cup=L.containers, extra=_coprime_jugs),
        _fam("In {a} years, {name} will be twice as old as {name} was {b} years ago. How old is {name} now?",
             name=names, nums={"a": (2, 30), "b": (2, 15)}),
        _fam("{name} is three times as old as {p1}. In {a} years, {name} will be only twice as old as {p1}. "
             "How old are they now?", name=names, nums={"a": (2, 20)}),
        _fam("How many times does the digit {d} appear when you write out every whole number from 1 to {n}?",
             d=range(1, 10), n=(99, 100, 250, 500, 1000)),
    ]
    return families


def _math() -> list[_Family]:
    L = _lists()
    names = L.names
    return [
        _fam("{name} buys {a} {item[0]} at ${b} each and one {item[1]} for ${c}. {name} pays with ${d}. How "
             "much change should {name} get?", name=names, item=L.item_pairs,
             nums={"a": (2, 6), "b": (2, 15), "c": (5, 40)}, extra=lambda rng,
             v: {"d": 50 * rng.randint(3, 6)}),
        _fam("At a market, {name} spends ${b} on each of {a} {item[0]} and ${c} on a {item[1]}. If {name} "
             "had ${d} that morning, what fraction of it is left?", name=names, item=L.item_pairs,
             nums={"a": (2, 6), "b": (2, 15), "c": (5, 40), "d": (150, 300)}),
        _fam("{name} travels {trip}: the first {a} km at {b} km/h and the remaining {c} km at {d} km/h. What "
             "is the average speed for the whole trip?", name=names, trip=L.trips,
             nums={"a": (20, 200), "b": (30, 110), "c": (20, 200), "d": (30, 110)}),
        _fam("{name} can {chore} in {a} hours, while {p1} needs {b} hours for the same job. How long will it "
             "take if they work together?", name=names, chore=L.chores, nums={"a": (2, 9), "b": (3, 12)}),
        _fam("A {item} costs ${a}. The store takes {b}% off, and then {c}% sales tax is added to the reduced "
             "price. How much does {name} pay at the register?", name=names, item=L.shop_items,
             nums={"a": (40, 900), "b": (5, 40), "c": (5, 12)}),
        _fam("{name} puts ${a:,} into a savings account that pays {b}% {kind}. How much money will be in the "
             "account after {c} years?", name=names, kind=L.account_kinds,
             nums={"a": (500, 20000), "b": (1, 8), "c": (2, 15)}),
        _fam("{name}'s rectangular {plot} is {a} m long and {b} m wide. A path {c} m wide is built around "
             "the outside of it. What is the area of the path, and what does it cost to pave at ${d} per "
             "square "
             "meter?", name=names, plot=L.plots, nums={"a": (8, 60), "b": (5, 40), "c": (1, 3), "d": (10, 90)}),
        _fam("{name} is {a} years old, and {name}'s {rel} is {b} times as old. In how many years will the "
             "{rel} be exactly twice {name}'s "
             "age?", name=names, rel=L.relatives, nums={"a": (4, 15), "b": (3, 5)}),
        _fam("{name} has taken {k} {subject} tests with an average score of {a}. What score does {name} need "
             "on the next test to bring the average up to {b}?", name=names, subject=L.school_subjects,
             nums={"k": (3, 8), "a": (60, 85)}, extra=lambda rng, v: {"b": v["a"] + rng.randint(2, 6)}),
        _fam("A recipe for {dish} serves {a} people and uses {b} grams of flour and {c} ml of milk. How much "
             "flour and milk does {name} need to make it for {d} people?", name=names, dish=L.dishes,
             nums={"a": (2, 6), "b": (100, 500), "c": (150, 600), "d": (7, 30)}),
        _fam("A bag holds {a} red, {b} blue and {c} green {things}. {name} draws two at random without "
             "putting the first one back. What is the probability that both are {color}?", name=names,
             things=L.draw_things, color=L.colors, nums={"a": (2, 9), "b": (2, 9), "c": (2, 9)}),
        _fam("Solve for {var}: {a}{var} + {b} = {c}{var} - {d}.{ask}", var=L.variables, ask=L.math_asks,
             nums={"a": (5, 12), "b": (1, 30), "c": (1, 4), "d": (1, 30)}),
        _fam("Find all real values of {var} such that {var}^2 - {s}{var} + {p} = 0.{ask}", var=L.variables,
             ask=L.math_asks, extra=_quadratic_from_roots),
        _fam("Let g({var}) = {a}{var}^2 - {b}{var} + {c}. What is g({d}), and for which {var} is g "
             "smallest?{ask}",
             var=L.variables, ask=L.math_asks, nums={"a": (1, 6), "b": (1, 20), "c": (1, 30), "d": (2, 9)}),
        _fam("{name} takes a train that leaves {city} at {h}:{mm:02d}. The train covers {d} km at an average "
             "speed of {s} km/h. At what time does {name} arrive?", name=names, city=L.cities,
             nums={"h": (5, 20), "mm": (0, 59), "d": (60, 600), "s": (60, 200)}),
        _fam("In a group of {a} {group}, {b}% {act[0]}, {c}% {act[1]}, and {d}% do both. How many of them do "
             "neither?", group=L.group_nouns, act=L.activity_pairs,
             nums={"b": (30, 55), "c": (20, 40), "d": (5, 15)},
             extra=lambda rng, v: {"a": 20 * rng.randint(3, 20)}),
        _fam("{name}'s {vehicle} uses {a} liters of fuel per 100 km, and fuel costs ${b}.{c:02d} per liter. "
             "How much will the fuel cost for a {d} km round trip?", name=names, vehicle=L.vehicles,
             nums={"a": (4, 12), "b": (1, 2), "c": (0, 99), "d": (50, 900)}),
        _fam("{name} read {f1} of a {pages}-page book on Monday and {f2} of the remaining pages on Tuesday. "
             "How many pages are still unread?", name=names, f1=L.fractions_first, f2=L.fractions_second,
             extra=lambda rng, v: {"pages": 240 * rng.randint(1, 3)}),
    ]


def _coding() -> list[_Family]:
    L = _lists()
    tasks, x = L.code_tasks, L.code_extras
    return [
        _fam("Write a Python function that {task}.{x}", task=tasks, x=x),
        _fam("Can you write Python code that {task}?{x}", task=tasks, x=x),
        _fam("I'm learning Python. Show me a program that {task}, and explain how each part works.{x}",
             task=tasks, x=x),
        _fam("Build a small Python program that {task}, {style}. Then describe two edge cases it has to "
             "handle.",
             task=tasks, style=L.code_styles),
        _fam("My Python code that {task} is slow on large inputs. What would an efficient version look like, "
             "and why is it faster?", task=tasks),
        _fam("Write unit tests for a Python function that {task}. Cover normal inputs and edge cases.",
             task=tasks),
        _fam("Review this plan: I want a Python module that {task}. What functions or classes should it "
             "have, and how would you write the core of it?{x}", task=tasks, x=x),
        _fam("Write a function in {lang} that {task}.{x}", lang=L.other_languages, task=tasks, x=x),
        _fam("{frame[0]}{sql}{frame[1]}{x}", frame=L.sql_frames, sql=L.sql_tasks, x=L.sql_extras),
    ]


def _extraction() -> list[_Family]:
    L = _lists()
    families = []
    for paragraph, key, values, nums, instructions in L.extraction_kinds:
        for head, tail in L.extraction_layouts:
            families.append(_fam(head + paragraph + tail, nums=nums, city=L.cities, instr=instructions,
                                 fmt=L.extract_formats, **{key: values}))
    return families


def _stem() -> list[_Family]:
    L = _lists()
    x = L.explain_extras
    return [
        _fam("Explain {concept}{aud}.{x}", concept=L.science_concepts, aud=L.audience_phrases, x=x),
        _fam("What is {concept}, and why does it matter in everyday life?{x}", concept=L.science_concepts, x=x),
        _fam("Walk me through {concept} step by step, starting from the basic idea.{x}",
             concept=L.science_concepts, x=x),
        _fam("What are the most common misconceptions about {concept}, and what is actually true?{x}",
             concept=L.science_concepts, x=x),
        _fam("Describe a simple experiment or everyday observation that shows {concept} in action.{x}",
             concept=L.science_concepts, x=x),
        _fam("Compare {pair[0]} and {pair[1]}. What do they have in common, and how do they differ?{x}",
             pair=L.stem_pairs, x=x),
        _fam("Why {why}? Explain the science behind it.{x}", why=L.stem_whys, x=x),
        _fam("Write the balanced chemical equation for {reaction} and explain what happens at the level of "
             "atoms and molecules.{x}", reaction=L.reactions, x=x),
        _fam("You are designing {system}. What are the key components and trade-offs you would consider?{x}",
             system=L.design_systems, x=x),
        _fam("A {obj} is dropped from a height of {h} meters {where}. Ignoring air resistance, how long does "
             "it take to reach the ground, and how fast is it moving just before impact?",
             obj=L.drop_objects, where=L.drop_places, nums={"h": (5, 120)}),
        _fam("{name}'s {app[0]} is rated at {w} watts and runs for {h} hours a day. How many kilowatt-hours "
             "does it use in a 30-day month, and what does that cost at {c} cents per kWh?", name=L.names,
             app=L.appliances, nums={"h": (1, 12), "c": (9, 45)},
             extra=lambda rng, v: {"w": 10 * rng.randint(v["app"][1] // 10, v["app"][2] // 10)}),
        _fam("A {mover} speeds up uniformly from rest to {v} m/s in {t} seconds. What is its acceleration, "
             "and how far does it travel in that time?", mover=L.movers, nums={"v": (3, 40), "t": (2, 30)}),
    ]


def _humanities() -> list[_Family]:
    L = _lists()
    x = L.explain_extras
    return [
        _fam("What were the main causes and consequences of {event}?{x}", event=L.history, x=x),
        _fam("Write a short essay on {event} and its lasting influence.{x}", event=L.history, x=x),
        _fam("Create a lesson plan for {length} on {event} for {grade} students. Include activities and "
             "discussion questions.", length=L.lesson_lengths, event=L.history, grade=L.grade_levels),
        _fam("Compare {pair[0]} and {pair[1]}: how were they similar, and how did they differ?{x}",
             pair=L.history_pairs, x=x),
        _fam("Explain {topic} and its effect on ordinary households.{x}", topic=L.economics, x=x),
        _fam("What are the strongest arguments for and against {policy}?{x}", policy=L.policies, x=x),
        _fam("Explain {idea} in plain language, then give one objection to it and a possible reply.{x}",
             idea=L.philosophy, x=x),
        _fam("How would {view} think about this dilemma? {dilemma}", view=L.phil_views, dilemma=L.dilemmas),
        _fam("Describe the key features of {art} and name a few representative works or figures.{x}",
             art=L.culture, x=x),
        _fam("Why does {art} still matter today? Answer with {form}.", art=L.culture, form=L.culture_formats),
        _fam("Discuss the impact of {trend} on {group}.{x}", trend=L.society, group=L.social_groups, x=x),
        _fam("Suggest {k} {works} for someone who wants to understand {theme}, with one sentence on why each "
             "is worth it.", k=L.count_words, works=L.work_kinds, theme=L.themes),
    ]


def _chat() -> list[_Family]:
    L = _lists()
    return [
        _fam("How do I {task}?{x}", task=L.howto, x=L.chat_extras),
        _fam("Give me {k} practical tips for {activity}.{x}", k=L.count_words, activity=L.tip_activities,
             x=L.tip_extras),
        _fam("What's the difference between {pair[0]} and {pair[1]}?{x}", pair=L.compare_pairs,
             x=L.compare_extras),
        _fam("{pair[0]} or {pair[1]}: which is better for {who}, and why?",
             pair=tuple((a[0].upper() + a[1:], b) for a, b in L.compare_pairs), who=L.advice_for),
        _fam("What does {term} mean? Explain it with an example.", term=L.terms),
        _fam("Can you define {term} in one short paragraph?", term=L.terms),
        _fam("Explain {term} like I'm five.", term=L.terms),
        _fam("{situation} {ask}", situation=L.situations, ask=L.situation_asks),
        _fam("Suggest {k} gift ideas for {who} who loves {hobby}.{x}", k=L.count_words[:3], who=L.gift_recipients,
             hobby=L.hobbies, x=L.gift_budgets),
        _fam("List {k} {things}.", k=L.count_words, things=L.listables),
        _fam("Why does {why}?{x}", why=L.everyday_whys, x=L.why_extras),
        _fam("Tell me something interesting about {topic}.{x}", topic=L.general_topics, x=L.topic_extras),
        _fam("Can you plan a {days} itinerary in {place} for {who}?", days=L.trip_lengths, place=L.places,
             who=L.travelers),
        _fam("What can I cook for dinner if I have {food}?{x}", food=L.fridge_contents, x=L.cook_extras),
        _fam("I want to start {habit}. Can you make me a simple {length} plan?", habit=L.habits,
             length=L.plan_lengths),
    ]


def _render_function(spec: _FnSpec, style: int, with_examples: bool) -> str:
    """Style 0: `typing` imports and a docstring opening on the `def` line; style 1: built-in generics and
    a docstring with its summary on its own line and an Examples section."""
    params, returns = spec.params, spec.returns
    generics = sorted(set(re.findall(r"\b(Dict|List|Tuple)\[", params + returns)))
    if style == 1:
        params, returns = (re.sub(r"\b(Dict|List|Tuple)\[", lambda m: m.group(1).lower() + "[", s)
                           for s in (params, returns))
    calls = [f">>> {spec.name}({', '.join(map(repr, args))})\n{spec.impl(*args)!r}".replace("\\", "\\\\")
             for args in spec.examples]  # escaped: the docstrings are not raw strings
    lines = [line for call in calls for line in call.split("\n")] if with_examples else []
    if style == 0:
        head = f"from typing import {', '.join(generics)}\n\n\n" if generics else ""
        body = textwrap.wrap('"""' + spec.doc, 80) + lines + ['"""']
    else:
        head = ""
        examples = ["", "Examples:"] + ["    " + line for line in lines] if lines else []
        body = ['"""'] + textwrap.wrap(spec.doc, 80) + examples + ['"""']
    return head + f"def {spec.name}({params}) -> {returns}:\n" + "".join(
        f"    {line}\n" if line else "\n" for line in body)


def _code_completion() -> list[_Family]:
    L = _lists()
    code = tuple(_render_function(spec, style, ex) for spec in FUNCTIONS for style in (0, 1) for ex in (True,
        False))
    return [
        _fam("{code}", code=code),
        _fam("{ask}\n\n{code}", ask=L.completion_asks, code=code),
        _fam("{ask}\n\n```python\n{code}```", ask=L.completion_fenced_asks, code=code),
        _fam("```python\n{code}```\n\n{ask}", ask=L.completion_after_asks, code=code),
    ]


@functools.lru_cache(maxsize=1)
def _catalog() -> dict[str, tuple[_Family, ...]]:
    builders = {
        "writing": _writing, "roleplay": _roleplay, "reasoning": _reasoning, "math": _math, "coding": _coding,
        "extraction": _extraction, "stem": _stem, "humanities": _humanities, "chat": _chat,
        "code_completion": _code_completion,
    }
    return {category: tuple(builders[category]()) for category in CATEGORIES}


# ----------------------------------------------------------------------------------------------------
# Building the pool
# ----------------------------------------------------------------------------------------------------


def pool_capacity() -> int:
    """How many distinct prompts the templates can make (the largest `n` for `build_prompt_pool`)."""
    return sum(family.size for families in _catalog().values() for family in families)


def _allocate(n: int, caps: Sequence[int]) -> list[int]:
    """Split n as evenly as possible over bins with the given capacities (requires n <= sum(caps))."""
    counts = [0] * len(caps)
    open_bins = [i for i, cap in enumerate(caps) if cap > 0]
    while n and open_bins:
        share, extra = divmod(n, len(open_bins))
        for rank, i in enumerate(open_bins):
            take = min(caps[i] - counts[i], share + (rank < extra))
            counts[i] += take
            n -= take
        open_bins = [i for i in open_bins if counts[i] < caps[i]]
    return counts


def _random_fields(rng: random.Random, chosen: dict) -> dict:
    """Decorations shared by all templates: people, places, companies, dates (d1 < d2 < d3), amounts."""
    L = _lists()
    names = [p for p in rng.sample(L.names, 5) if p != chosen.get("name")][:4]
    cities = [c for c in rng.sample(L.cities, 3) if c != chosen.get("city")][:2]
    fields = {f"p{i}": p for i, p in enumerate(names, 1)}
    fields.update({f"s{i}": s for i, s in enumerate(rng.sample(L.surnames, 4), 1)})
    fields.update({f"co{i}": c for i, c in enumerate(rng.sample(L.companies, 2), 1)})
    fields.update({f"c{i}": c for i, c in enumerate(cities, 1)})
    start = datetime.date(2023, 1, 1)
    for i, offset in enumerate(sorted(rng.sample(range(900), 3)), 1):
        day = start + datetime.timedelta(days=offset)
        fields[f"d{i}"] = f"{day:%B} {day.day}, {day.year}"
    for i in (1, 2):
        fields[f"m{i}"] = f"${rng.randint(12, 480) / 10:g} million"
        fields[f"pr{i}"] = f"${rng.randint(5, 120)}"
    return fields


def _render(family: _Family, index: int, rng: random.Random) -> str:
    chosen = {}
    for key, values in family.slots:
        index, position = divmod(index, len(values))
        chosen[key] = values[position]
    fields = _random_fields(rng, chosen)
    fields.update({key: rng.randint(low, high) for key, (low, high) in family.nums})
    fields.update(chosen)
    if family.extra is not None:
        fields.update(family.extra(rng, fields))
    text = family.template.format(**fields)
    return "\n".join(line.rstrip() for line in text.strip().split("\n"))


def build_prompt_pool(n: int, seed: int = 0) -> list[PoolPrompt]:
    """n unique prompts, categories mixed roughly evenly (code_completion + coding together ~20%),
    deterministic for a given (n, seed)."""
    capacity = pool_capacity()
    if not 0 <= n <= capacity:
        raise ValueError(f"n={n} is out of range: the templates can make at most {capacity} distinct prompts")
    rng = random.Random(seed)
    catalog = _catalog()
    category_caps = [sum(f.size for f in catalog[c]) for c in CATEGORIES]
    pool = []
    for category, quota in zip(CATEGORIES, _allocate(n, category_caps)):
        families = catalog[category]
        for family, count in zip(families, _allocate(quota, [f.size for f in families])):
            pool += [PoolPrompt(_render(family, i, rng), category) for i in rng.sample(range(family.size),
                count)]
    rng.shuffle(pool)
    return pool


def followups(category: str) -> tuple[str, ...]:
    """The second user turns that fit a first-turn prompt of `category`: the general ones, then the category's."""
    if category not in CATEGORIES:
        raise ValueError(f"unknown category {category!r}; expected one of {CATEGORIES}")
    L = _lists()
    table = dict(L.followups)
    return table["general"] + table.get(category, ())


def followup(category: str, pool_index: int, seed: int = 0) -> str:
    """The follow-up (second user turn) for pool prompt `pool_index` of `category`: a choice from
    `followups(category)` that depends only on (category, pool_index, seed), so a corpus can be extended."""
    options = followups(category)
    return options[random.Random(f"followup:{seed}:{pool_index}").randrange(len(options))]


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def _ngrams(words: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def ngram_overlaps(candidates: list[str], references: list[str], n: int = 8) -> list[int]:
    """indices of candidates sharing any lower-cased word n-gram with any reference."""
    seen = set().union(*(_ngrams(_words(ref), n) for ref in references)) if references else set()
    return [i for i, text in enumerate(candidates) if not seen.isdisjoint(_ngrams(_words(text), n))]
