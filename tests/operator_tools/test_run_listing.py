"""`make runs`: the listing names the Jobs the cluster will show, and their output where it lands."""

from __future__ import annotations

import io
from pathlib import Path

import yaml

from cluster_facts.kubernetes_names import TEAMS_DIR
from cluster_facts.kubernetes_plan import ManifestSet
from config import load_config
from operator_tools.run_listing import main, run_listings
from tests.conftest import DEFAULT_CONFIG, EXAMPLE_CONFIG, REPO_ROOT, Synthesized


def test_each_run_is_listed_with_the_name_of_the_job_the_stack_applies(example_stack: Synthesized) -> None:
    listings = run_listings(load_config(EXAMPLE_CONFIG))
    assert [listing.name for listing in listings] == ["bert-large", "llm"]
    for listing in listings:
        # The deployed plan (real file system tokens), not the review plan the listing uses: the
        # identity is known at synth, so both name the same Job.
        step = example_stack.stack.kubernetes_plan.step(f"run-{listing.name}")
        assert isinstance(step, ManifestSet)
        [job] = step.manifests
        assert job["metadata"]["name"] == listing.identity
        assert (job["metadata"]["namespace"], job["spec"]["queue"]) == (listing.namespace, listing.queue)
        assert step.applied is listing.applied
        [container] = job["spec"]["tasks"][0]["template"]["spec"]["containers"]
        output_dir = next(env["value"] for env in container["env"] if env["name"] == "OUTPUT_DIR")
        # The pod sees its team's directory at /data; on the file system it is /teams/<team>.
        assert listing.output == f"/{TEAMS_DIR}/{listing.namespace}" + output_dir.removeprefix("/data")


def test_the_table_shows_nodes_queue_and_output() -> None:
    out = io.StringIO()
    assert main(["--config", str(EXAMPLE_CONFIG)], stdout=out) == 0
    header, bert, llm = out.getvalue().splitlines()
    assert header.split()[:2] == ["run", "job"]
    assert "4 x trn1n.32xlarge (trn1n-32xl)" in bert and " test " in bert and "applied" in bert
    assert "8 x trn1.32xlarge (trn1-32xl-block)" in llm and "rendered only" in llm
    assert "/teams/research/runs/llm-" in llm


def test_no_runs_says_so(tmp_path: Path) -> None:
    config = tmp_path / "none.yaml"
    config.write_text(yaml.safe_dump({**yaml.safe_load(DEFAULT_CONFIG.read_text()), "runs": []}))
    out = io.StringIO()
    assert main(["--config", str(config)], stdout=out) == 0
    assert out.getvalue().startswith(f"{config}: no runs configured")


def test_a_bad_configuration_is_one_line_per_problem(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(DEFAULT_CONFIG.read_text().replace("nodes: 2", "nodes: 4", 1))
    err = io.StringIO()
    assert main(["--config", str(config)], stderr=err) == 1
    [line] = err.getvalue().splitlines()
    assert line.startswith(f"{config}: runs[0].nodes: ")


def test_the_table_in_docs_runs_is_what_make_runs_prints_for_the_example() -> None:
    out = io.StringIO()
    main(["--config", str(EXAMPLE_CONFIG)], stdout=out)
    doc = (REPO_ROOT / "docs" / "runs.md").read_text()
    assert out.getvalue().strip() in doc


def test_the_manifest_column_follows_out() -> None:
    out = io.StringIO()
    assert main(["--config", str(DEFAULT_CONFIG), "--out", "build/review"], stdout=out) == 0
    assert out.getvalue().splitlines()[1].endswith("build/review/k8s/run-bert-large.yaml")
