"""The house rules, checked on the source: imports run one way between the subpackages, without cycles; the core
never imports `training` or the app layer; `import treespec` loads no training code."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "treespec"
CORE = ("models", "decode", "drafters", "api", "plan", "eval")
# what each part may import (besides itself and treespec.errors); the package's top-level modules (__init__ and the
# compatibility names configs, generate, optimizer, policies, tree) may import anything but training
ALLOWED = {
    "models": set(),
    "decode": {"models"},
    "drafters": {"models", "decode", "plan.optimizer"},
    "api": {"models", "decode", "drafters"},
    "plan": {"models", "decode", "drafters", "api"},
    "eval": {"models", "decode", "drafters", "api", "plan"},
    "app": {"models", "decode", "drafters", "api", "plan", "eval"},
    "training": {"models", "decode", "drafters", "api", "plan", "eval"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports(path: Path, known: set[str]) -> set[str]:
    """Every treespec module `path` imports, at the top or inside a function, with the packages each one runs."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            if name.startswith("treespec"):
                parts = name.split(".")
                found |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & known
    return found


def part(name: str) -> str:
    """'models', 'decode', ..., 'api', or '' for the package's own top-level modules."""
    parts = name.split(".")
    if len(parts) == 1:
        return ""
    return parts[1] if parts[1] in ALLOWED else ""


def test_imports_run_one_way():
    known = set(modules())
    wrong = []
    for name, path in modules().items():
        own = part(name)
        targets = imports(path, known) - {name, "treespec", "treespec.errors"}
        leaves = {t for t in targets if not any(o.startswith(t + ".") for o in targets)}  # a package run on the way
        for target in leaves:
            other = part(target)
            if other == own and own:
                continue
            if own == "":
                if other == "training":
                    wrong.append(f"{name} imports {target}")
                continue
            allowed = ALLOWED[own]
            if other not in allowed and target.removeprefix("treespec.") not in allowed:
                wrong.append(f"{name} imports {target}")
    assert not wrong, "imports against the layering:\n" + "\n".join(sorted(wrong))


def test_no_import_cycle():
    known = set(modules())
    graph = {name: imports(path, known) - {name} for name, path in modules().items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1 and not node.startswith(nxt + ".") and nxt != "treespec":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for name in sorted(graph):
        if name not in state:
            cycle = visit(name)
            assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_importing_treespec_loads_no_training_or_app_code():
    code = ("import sys, treespec; loaded = [m for m in sys.modules if m.startswith(('treespec.training', "
            "'treespec.app', 'hydra'))]; assert not loaded, loaded")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_every_subpackage_says_what_it_holds_and_may_import():
    for sub in (*CORE, "app", "training"):
        init = PACKAGE / sub / "__init__.py" if (PACKAGE / sub).is_dir() else PACKAGE / f"{sub}.py"
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc.splitlines()) >= 3, f"{init} needs a docstring saying what it holds"
        if sub not in ("api", "training"):
            assert "import" in doc, f"{init}'s docstring should say what the subpackage may import"


def test_the_library_leaves_grad_mode_alone():
    """Only an entry point's `main` may switch autograd off for the whole process; library code scopes it
    (`torch.inference_mode`), so that a caller (a training loop, a test) is not left without gradients."""
    offenders = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name != "main":
                for call in ast.walk(node):
                    if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                            and call.func.attr == "set_grad_enabled"):
                        offenders.append(f"{name}.{node.name}")
    assert not offenders, offenders
