"""``python -m preflight``: arguments, the report on stdout, one-line errors on stderr, exit codes.

Exit codes:

- 0: every check passed (WARN rows allowed);
- 1: at least one check failed;
- 2: AWS could not be asked: no credentials, credentials refused, AWS unreachable, or throttled
  on every attempt;
- 3: a local problem, nothing or not everything asked of AWS: the configuration file is invalid
  (its problems are printed one per line), ``--write`` could not write it, or the command line is wrong.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn, TextIO

from config.loader import ConfigError, load_config
from config.model import StackConfig
from preflight.aws import DEFAULT_MAX_ATTEMPTS, AwsUnavailable, Clients, gather_facts, make_clients
from preflight.checks import CheckResult, run_checks
from preflight.costs import cost_rows
from preflight.image_checks import check_images
from preflight.image_inventory import pulled_images
from preflight.lambda_concurrency import LambdaDemand, TemplateError, lambda_demand
from preflight.live_versions import version_checks
from preflight.registries import ask_registries
from preflight.report import DEFAULT_WIDTH, render, summary
from preflight.rewrite import RewriteError, apply_zone_changes, plan_zone_changes

__all__ = ["EXIT_AWS_UNAVAILABLE", "EXIT_CHECK_FAILED", "EXIT_LOCAL_PROBLEM", "EXIT_OK", "main"]

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_AWS_UNAVAILABLE = 2
EXIT_LOCAL_PROBLEM = 3

ClientsFactory = Callable[[str, int], Clients]
"""(region, max attempts) -> clients; tests pass one that returns stubbed clients."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # argparse's own code is 2, which here means "AWS unavailable".
        self.print_usage(sys.stderr)
        self.exit(EXIT_LOCAL_PROBLEM, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m preflight",
        description="Check, read-only, that the AWS account can deploy this configuration: zones, "
        "instance type offerings, Trn quotas, capacity reservations and the EKS version; and show what "
        "it costs per hour, idle and at max_size, from the AWS Price List.",
        epilog="Exit codes: 0 all checks passed, 1 a check failed, 2 AWS unreachable or no "
        "credentials, 3 invalid configuration file, --write failed or bad arguments.",
    )
    parser.add_argument(
        "--config", required=True, type=Path, help="the configuration file, e.g. config/my-account.yaml"
    )
    parser.add_argument(
        "--write",
        action="store_true",
        help="set trainium.availability_zone (and the matching vpc.availability_zones entry) to the "
        "name trainium.availability_zone_id has in this account, keeping the file's comments",
    )
    parser.add_argument(
        "--template",
        type=Path,
        help="the configuration's synthesized template (make synth: cdk.out/TrainiumStack.template.json), "
        "from which the Lambda concurrency check reads what a deploy runs at once; make preflight passes it",
    )
    parser.add_argument(
        "--max-attempts",
        type=_positive,
        default=DEFAULT_MAX_ATTEMPTS,
        help=f"attempts per AWS call when throttled or on network errors (default {DEFAULT_MAX_ATTEMPTS})",
    )
    parser.add_argument(
        "--width",
        type=_positive,
        default=DEFAULT_WIDTH,
        help=f"report width in columns (default {DEFAULT_WIDTH})",
    )
    return parser


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number")
    return number


def _template_demand(template: Path, *, expected_cluster: str, config_path: Path) -> LambdaDemand:
    """What a deploy of ``template`` runs at once; TemplateError (one line) when it cannot be read or
    was synthesized from another configuration than ``config_path``."""
    try:
        data = json.loads(template.read_text())
    except OSError as error:
        raise TemplateError(
            f"{template}: {error.strerror or error}; run make synth CONFIG={config_path}"
        ) from None
    except ValueError as error:
        raise TemplateError(f"{template}: not JSON ({error})") from None
    if not isinstance(data, dict):
        raise TemplateError(f"{template}: not a CloudFormation template")
    try:
        demand = lambda_demand(data)
    except TemplateError as error:
        raise TemplateError(f"{template}: {error}") from None
    if demand.cluster_name != expected_cluster:
        raise TemplateError(
            f"{template} is the template of cluster {demand.cluster_name!r}, not of {config_path} (name: "
            f"{expected_cluster}); run make synth CONFIG={config_path}"
        )
    return demand


def _image_rows(config: StackConfig, clients: Clients) -> list[CheckResult]:
    """One row per image the nodes pull (preflight/image_checks.py), asked of its registry."""
    images = pulled_images(config)
    if clients.ecr is None or clients.registry_http is None:
        return check_images(images, {})
    return check_images(images, ask_registries(images, ecr=clients.ecr, http=clients.registry_http))


def _default_clients(region: str, max_attempts: int) -> Clients:
    return make_clients(region, max_attempts=max_attempts)


def main(
    argv: Sequence[str] | None = None,
    *,
    clients_factory: ClientsFactory = _default_clients,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    args = _parser().parse_args(argv)
    path: Path = args.config

    try:
        config = load_config(path)
    except ConfigError as error:
        for line in error.lines():
            print(line, file=err)
        return EXIT_LOCAL_PROBLEM

    try:
        demand = (
            None
            if args.template is None
            else _template_demand(args.template, expected_cluster=config.name, config_path=path)
        )
    except TemplateError as error:
        print(f"--template: {error}", file=err)
        return EXIT_LOCAL_PROBLEM

    try:
        clients = clients_factory(config.region, args.max_attempts)
        facts = gather_facts(config, clients)
    except AwsUnavailable as error:
        print(f"preflight: {error}", file=err)
        return EXIT_AWS_UNAVAILABLE

    write_failed = False
    if args.write:
        try:
            changes = plan_zone_changes(config, facts)
        except RewriteError as error:
            print(f"--write: {path} not changed: {error}", file=err)
            changes = []
        else:
            if not changes:
                print(f"--write: {path} already uses this account's zone names; not changed", file=out)
        if changes:
            try:
                apply_zone_changes(path, changes)
            except RewriteError as error:
                print(f"--write: {error}", file=err)
                write_failed = True
            else:
                edits = ", ".join(f"{change.key} {change.old} -> {change.new}" for change in changes)
                print(f"--write: {path}: {edits}", file=out)
                config = load_config(path)

    # The account's rows, the live versions, the images, then the cost rows (they PASS or WARN, and
    # never fail the run).
    results = (
        run_checks(config, facts, demand)
        + version_checks(config, facts)
        + _image_rows(config, clients)
        + cost_rows(config, facts)
    )
    print(f"Preflight of {path} for account {facts.account_id} in {facts.region}", file=out)
    print(file=out)
    print(render(results, width=args.width), file=out)
    print(file=out)
    print(summary(results), file=out)
    if write_failed:
        return EXIT_LOCAL_PROBLEM
    return EXIT_CHECK_FAILED if any(result.status == "FAIL" for result in results) else EXIT_OK
