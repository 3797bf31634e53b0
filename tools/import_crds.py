"""Generate the typed Volcano classes in k8s_charts/imports/ from the kept CRD schemas (``make crds``).

    python -m tools.import_crds --cdk8s node_modules/.bin/cdk8s   (from the repository root)

Reads the schemas of the chart release the cluster installs (cluster_facts.versions:
VOLCANO_CRD_SCHEMAS, which follows VOLCANO_CHART_VERSION) and runs the pinned ``cdk8s import``
once per API group, so each package carries only its own jsii assembly:

- ``k8s_charts.imports.volcano_batch``: Job (batch.volcano.sh/v1alpha1)
- ``k8s_charts.imports.volcano_scheduling``: Queue and PodGroup (scheduling.volcano.sh/v1beta1)

cdk8s names Python packages after the reversed group (``sh.volcano.batch``); they are moved to
flat names (the generated code finds its assembly relative to its own ``__name__``). Then
``generated_from.json`` records the CLI version and a digest of every schema file, which
tests/k8s_charts/test_volcano_types.py compares with the kept schemas: new schemas without a new import fail.
Needs node on PATH (the Makefile puts the venv's Node.js 24 first); output is deterministic.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from cluster_facts.versions import VOLCANO_CHART_VERSION, VOLCANO_CRD_SCHEMAS

ROOT = Path(__file__).resolve().parent.parent

IMPORTS = ROOT / "k8s_charts" / "imports"
PROVENANCE = IMPORTS / "generated_from.json"
# API group -> the package it becomes under k8s_charts/imports/.
PACKAGES = {"batch.volcano.sh": "volcano_batch", "scheduling.volcano.sh": "volcano_scheduling"}


def schema_digests(schemas: Path) -> dict[str, str]:
    """File name -> sha256 of every CRD file in ``schemas``: what generated_from.json records."""
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(schemas.glob("*.yaml"))
    }


def cli_version(cdk8s: Path) -> str:
    package = cdk8s.resolve().parent.parent / "package.json"
    version: str = json.loads(package.read_text())["version"]
    return version


def import_group(cdk8s: Path, group: str, files: list[Path], staging: Path) -> Path:
    """Run ``cdk8s import`` on the CRDs of one API group; return the generated Python package."""
    work = staging / group
    work.mkdir()
    # One document stream: every file starts with `---`, empty documents are skipped by cdk8s.
    (work / "crds.yaml").write_text("\n".join(path.read_text() for path in files))
    result = subprocess.run(
        [
            str(cdk8s),
            "import",
            "crds.yaml",
            "--language",
            "python",
            "--output",
            "imports",
            "--no-check-upgrade",
            "--no-save",
        ],
        cwd=work,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        sys.exit(
            f"cdk8s import failed for {group} (exit {result.returncode}):\n{result.stdout}{result.stderr}"
        )
    package = work / "imports" / Path(*reversed(group.split(".")))
    if not (package / "__init__.py").is_file():
        sys.exit(f"cdk8s import wrote no package {package.relative_to(work)} for {group}")
    return package


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cdk8s", type=Path, required=True, help="the cdk8s CLI, e.g. node_modules/.bin/cdk8s"
    )
    args = parser.parse_args()
    cdk8s = ROOT / args.cdk8s  # an absolute --cdk8s stays as it is
    schemas = ROOT / VOLCANO_CRD_SCHEMAS
    if not schemas.is_dir():
        sys.exit(
            f"no CRD schemas for Volcano {VOLCANO_CHART_VERSION}: add the chart's CRD files to "
            f"{VOLCANO_CRD_SCHEMAS}/ (cluster_facts/versions.py names the release)"
        )
    by_group = {group: sorted(schemas.glob(f"{group}_*.yaml")) for group in PACKAGES}
    for group, files in by_group.items():
        if not files:
            sys.exit(f"no {group}_*.yaml in {VOLCANO_CRD_SCHEMAS}/")

    with tempfile.TemporaryDirectory(prefix="cdk8s-import-") as staging:
        for group, files in by_group.items():
            package = import_group(cdk8s, group, files, Path(staging))
            target = IMPORTS / PACKAGES[group]
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(package, target)
            print(f"{target.relative_to(ROOT)}: {', '.join(path.name for path in files)}")

    provenance = {
        "cdk8s-cli": cli_version(cdk8s),
        "schemas": VOLCANO_CRD_SCHEMAS,
        "sha256": schema_digests(schemas),
    }
    PROVENANCE.write_text(json.dumps(provenance, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
