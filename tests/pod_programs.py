"""The platform's pod programs (cluster_programs/*.py) as modules, for tests that call their functions.

They are files shipped into pods, not package modules: each imports its neighbours by plain name
(``kube_api``), as it does in the pod, where they sit in one directory.
"""

from __future__ import annotations

import functools
import importlib
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["SCRIPTS", "program"]

SCRIPTS = Path(__file__).resolve().parent.parent / "cluster_programs"


@functools.cache
def program(name: str) -> ModuleType:
    """``cluster_programs/<name>.py``, imported as the pod imports it."""
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    return importlib.import_module(name)
