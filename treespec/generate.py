"""`python -m treespec.generate`: the demo (treespec.app.demo). As an attribute of the package, `treespec.generate`
is also the decoding function (treespec.api.generate): importing this module keeps it callable."""

from __future__ import annotations

import sys
import types
from typing import Any

from treespec.api import Generation, generate
from treespec.app.demo import main


class _CallableModule(types.ModuleType):
    """`treespec.generate` names both this CLI module and the engine's function. Importing the module makes Python
    bind it as the package attribute, shadowing the function; making the module callable keeps
    `treespec.generate(target, draft, input_ids, ...)` working whichever is bound."""

    def __call__(self, *args: Any, **kwargs: Any) -> Generation:
        return generate(*args, **kwargs)


if __name__ == "__main__":
    main()
else:
    sys.modules[__name__].__class__ = _CallableModule
