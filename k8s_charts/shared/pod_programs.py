"""The platform's in-cluster Python programs as they ship: each beside the one API client they share.

Every program in ``cluster_programs/`` that talks to the API server imports ``kube_api``
(cluster_programs/kube_api.py); a pod gets both files in one directory (a ConfigMap, or a
temporary directory its script writes), so that one client serves them all.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from cluster_facts.script_files import program_text

__all__ = ["API_CLIENT", "API_CLIENT_FILE", "program_digest", "program_files"]

API_CLIENT_FILE = "kube_api.py"
API_CLIENT = program_text(API_CLIENT_FILE)


def program_files(program_file: str, *modules: str) -> dict[str, str]:
    """File name -> text: the program ``cluster_programs/<program_file>``, the modules of that
    folder it imports, and the API client."""
    return {
        program_file: program_text(program_file),
        **{module: program_text(module) for module in modules},
        API_CLIENT_FILE: API_CLIENT,
    }


def program_digest(files: Mapping[str, str]) -> str:
    """SHA-256 over every file (names and texts): a pod template annotated with it restarts when any changes."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(f"{name}\0{files[name]}\0".encode())
    return digest.hexdigest()
