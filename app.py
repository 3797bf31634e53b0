#!/usr/bin/env python3
"""The CDK app: read the configuration named by the `config` context key, then build TrainiumStack.

cdk synth -c config=config/default.yaml
cdk deploy TrainiumStack -c config=config/my-account.yaml
cdk synth -c pipeline=config/pipeline.example.yaml        # TrainiumPipeline and its stages instead
"""

import sys
from pathlib import Path

import aws_cdk as cdk

from cluster_plan.review_files import write_fabric_check_jobs, write_review_files
from config import DEFAULT_CONFIG, ConfigError, load_config
from config.pipeline import load_pipeline, repository_path
from constructs_trn.nag import add_aws_solutions_checks
from stacks.trainium_stack import add_trainium_stack


def main() -> int:
    app = cdk.App()
    # Every stack of every stage is checked against the AwsSolutions rules when the app synthesizes:
    # an unacknowledged finding fails `cdk synth`. Acknowledgments sit next to the construct they
    # excuse (constructs_trn.nag.acknowledge).
    add_aws_solutions_checks(app)
    pipeline_path = app.node.try_get_context("pipeline")
    if pipeline_path:
        return synth_pipeline(app, str(pipeline_path))
    config_path = app.node.try_get_context("config") or str(DEFAULT_CONFIG)
    try:
        config = load_config(config_path)
    except ConfigError as error:
        # One line per problem and no traceback; nothing has been synthesized yet.
        print("\n".join(error.lines()), file=sys.stderr)
        return 1
    stack = add_trainium_stack(app, config)
    assembly = app.synth()
    write_review_files(assembly, [stack], Path(app.outdir))
    return 0


def synth_pipeline(app: cdk.App, pipeline_path: str) -> int:
    """Pipeline mode: TrainiumPipeline and one stage per environment, nothing else.

    The `config` key (which make synth always passes) is not read: each stage builds from the
    environment file the pipeline file names. A summary per stage, but no cdk.out/k8s/: one export
    per stage would add nothing the stage templates do not hold.
    """
    # Imported here: CDK Pipelines and CodeBuild cost a plain `make synth` about 0.1 s to load.
    from stacks.pipeline_stack import TrainiumPipeline  # noqa: PLC0415

    try:
        pipeline = load_pipeline(pipeline_path)
        pipeline_file = repository_path(pipeline_path)
    except ConfigError as error:
        print("\n".join(error.lines()), file=sys.stderr)
        return 1
    trainium_pipeline = TrainiumPipeline(app, pipeline=pipeline, pipeline_file=pipeline_file)
    assembly = app.synth()
    write_review_files(
        assembly,
        [stage.stack for stage in trainium_pipeline.stages.values()],
        Path(app.outdir),
        kubernetes=False,
    )
    # The fabric-check Jobs of the stages whose deployment check runs them (fabric_check.pipeline).
    for stage in trainium_pipeline.stages.values():
        write_fabric_check_jobs(stage.config, stage_id=stage.stage_name, outdir=Path(app.outdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
