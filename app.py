#!/usr/bin/env python3
"""The CDK app: read the configuration named by the `config` context key, then build TrainiumStack.

cdk synth -c config=config/default.yaml
cdk deploy TrainiumStack -c config=config/my-account.yaml
"""

import sys
from pathlib import Path

import aws_cdk as cdk

from config import DEFAULT_CONFIG, ConfigError, load_config
from k8s_charts.cluster_layer import build_charts, write_yaml
from stacks.kubernetes_values import PLACEHOLDER_FILE_SYSTEM, kubernetes_values
from stacks.trainium_stack import add_trainium_stack


def main() -> int:
    app = cdk.App()
    config_path = app.node.try_get_context("config") or str(DEFAULT_CONFIG)
    try:
        config = load_config(config_path)
    except ConfigError as error:
        # One line per problem and no traceback; nothing has been synthesized yet.
        print("\n".join(error.lines()), file=sys.stderr)
        return 1
    add_trainium_stack(app, config)
    app.synth()
    # The same charts as YAML for review and kubectl, with the file system's deploy-time values
    # as ${StackOutput} placeholders.
    write_yaml(build_charts(kubernetes_values(config, **PLACEHOLDER_FILE_SYSTEM)), Path(app.outdir) / "k8s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
