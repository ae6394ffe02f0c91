"""The README's API example runs as written."""

import re
from pathlib import Path

README = Path(__file__).parents[2] / "README.md"


def test_readme_api_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert blocks, "README has no python example"
    namespace: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)  # noqa: S102
    assert namespace["out"].tokens == namespace["base"].tokens
