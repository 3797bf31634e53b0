"""Reading the shell scripts that pods and builds run, kept as files beside the code that uses them.

A script lives in a ``scripts/`` folder of the package that renders it, where shellcheck reads it
(``make lint``) and tests run it. What is rendered into a manifest or a buildspec is the script
without its header (the shebang and the comment block that documents its inputs): the header is
for the people reading the repository; the rendered objects stay as short as before.
"""

from __future__ import annotations

from importlib import resources

__all__ = ["program_body", "program_text", "script_body", "script_text"]

# The in-cluster programs' own package: files read and shipped in ConfigMaps, never imported by the product.
PROGRAMS = "cluster_programs"


def script_text(package: str, name: str) -> str:
    """The whole file ``<package>/scripts/<name>``."""
    return (resources.files(package) / "scripts" / name).read_text(encoding="utf-8")


def program_text(name: str) -> str:
    """The whole file ``cluster_programs/<name>``: an in-cluster program, as a pod gets it."""
    return (resources.files(PROGRAMS) / name).read_text(encoding="utf-8")


def script_body(package: str, name: str) -> str:
    """The file ``<package>/scripts/<name>`` from its first line that is neither a comment nor blank."""
    return _body(script_text(package, name))


def program_body(name: str) -> str:
    """The file ``cluster_programs/<name>`` from its first line that is neither a comment nor blank."""
    return _body(program_text(name))


def _body(text: str) -> str:
    lines = text.splitlines(keepends=True)
    start = next(
        (index for index, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("#")),
        len(lines),
    )
    return "".join(lines[start:])
