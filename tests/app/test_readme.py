"""The README's API example runs as written; the README stays short and every link in it and in docs/ resolves
inside the repository."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_readme_api_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert blocks, "README has no python example"
    namespace: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)  # noqa: S102
    assert namespace["out"].tokens == namespace["base"].tokens


@pytest.mark.real_models
def test_readme_default_pair_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    namespace: dict = {}
    exec(compile(blocks[0].split("target, draft = ")[0] + blocks[1], "README.md", "exec"), namespace)  # noqa: S102
    pair, out = namespace["pair"], namespace["out"]
    assert pair.hardware is not None and pair.hardware.name == "auto" and len(out.tokens) == 64
    assert out.tokens == namespace["treespec"].autoregressive(pair.target, pair.encode("Why is the sky blue?"),
                                                             max_new_tokens=64).tokens


def test_readme_is_short():
    assert len(README.read_text().splitlines()) <= 250


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(), flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_link_resolves_inside_the_repository():
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists() or ROOT.resolve() not in file.parents:
                broken.append(f"{page.name}: {target}")
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, broken
