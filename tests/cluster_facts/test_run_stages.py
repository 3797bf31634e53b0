"""The run stages are one ordered list of unique, stable ids that the timeline and the canary share."""

from __future__ import annotations

import re

from cluster_facts.run_stages import RUN_STAGES, stage_ids


def test_stage_ids_are_unique_snake_case_and_titled() -> None:
    ids = stage_ids()
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"[a-z]+(_[a-z]+)*", stage) for stage in ids)
    assert all(stage.title and not stage.title.endswith(".") for stage in RUN_STAGES)


def test_the_path_runs_from_pending_pods_to_the_first_step() -> None:
    ids = stage_ids()
    assert ids[0] == "pods_pending"
    assert ids[-1] == "first_step"
    # A node exists before its devices, is checked before a gang is bound, pulls after binding.
    assert (
        ids.index("node_join")
        < ids.index("device_plugins")
        < ids.index("node_check")
        < ids.index("pods_bound")
    )
    assert ids.index("pods_bound") < ids.index("image_pull") < ids.index("compile") < ids.index("rendezvous")
