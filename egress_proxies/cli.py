"""The `egress-proxies` command."""

from __future__ import annotations

import argparse
import sys
import typing
from collections.abc import Sequence
from typing import Any, NoReturn, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings

from egress_proxies import crd
from egress_proxies.leases import redact_url
from egress_proxies.settings import (
    DevClusterDownSettings,
    DevClusterUpSettings,
    DiscoverySettings,
    RunSettings,
    drop_trace_context,
    flag_of,
    form_of,
    variables_of,
)

Model = TypeVar("Model", bound=BaseModel)

# The models whose variables every command checks: a malformed one stops any command.
ENVIRONMENT_MODELS: tuple[type[BaseSettings], ...] = (RunSettings, DiscoverySettings)


def build_parser() -> argparse.ArgumentParser:
    """The command-line grammar."""
    parser = argparse.ArgumentParser(
        prog="egress-proxies", description="A Kubernetes operator for crawler egress proxies."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    dev = commands.add_parser("dev-cluster", help="a local control plane with one node")
    dev_commands = dev.add_subparsers(dest="action", required=True)
    up = dev_commands.add_parser("up", help="start the dev cluster (foreground unless --detach)")
    add_settings_arguments(up, DevClusterUpSettings)
    down = dev_commands.add_parser("down", help="stop a dev cluster and everything it started")
    add_settings_arguments(down, DevClusterDownSettings)
    crd_command = commands.add_parser("crd", help="print a CRD generated from the models")
    crd_command.add_argument("resource", nargs="?", choices=("proxy", "proxypool"), default="proxy")
    run = commands.add_parser("run", help="run the operator")
    add_settings_arguments(run, RunSettings)
    tier = commands.add_parser(
        "discovery", help="serve the discovery + lease API alone (any number of replicas)"
    )
    add_settings_arguments(tier, DiscoverySettings)
    return parser


def add_settings_arguments(parser: argparse.ArgumentParser, model: type[BaseModel]) -> None:
    """One flag per field of `model`, grouped by the sub-model that declares it.

    A flag left out stays out of the parsed arguments, so the variable or the default applies.
    """
    for title, names in _groups(model).items():
        group = parser.add_argument_group(title)
        for name in names:
            _add_argument(group, model, name)


def _groups(model: type[BaseModel]) -> dict[str, list[str]]:
    """The fields of `model` under the title of the sub-model that first declares each.

    The command's own options come first, then those of its sub-models.
    """
    hierarchy = [cls for cls in model.__mro__ if issubclass(cls, BaseModel)]
    groups: dict[str, list[str]] = {str(getattr(cls, "title", "options")): [] for cls in hierarchy}
    for name in model.model_fields:
        declaring = [cls for cls in hierarchy if name in vars(cls).get("__annotations__", {})]
        groups[str(getattr(declaring[-1], "title", "options"))].append(name)
    return {title: names for title, names in groups.items() if names}


def _add_argument(group: argparse._ArgumentGroup, model: type[BaseModel], name: str) -> None:
    info = model.model_fields[name]
    variables = variables_of(model, name)
    shown = "unset" if info.default in (None, []) else info.default
    sources = [" or ".join(f"${variable}" for variable in variables)] if variables else []
    sources.append("required" if info.is_required() else f"default: {shown}")
    text = info.description or ""
    if sources:
        text += f" ({'; '.join(sources)})"
    common: dict[str, Any] = {
        "dest": name,
        "default": argparse.SUPPRESS,
        "help": text.replace("%", "%%"),
        # A required field with a variable may come from it; one without must be a flag.
        "required": info.is_required() and not variables,
    }
    if info.annotation is bool:
        group.add_argument(flag_of(model, name), action="store_const", const=True, **common)
    else:
        flag = flag_of(model, name)
        group.add_argument(
            flag,
            action="append" if typing.get_origin(info.annotation) is list else "store",
            metavar=flag.removeprefix("--").replace("-", "_").upper(),
            **common,
        )


def read_options(flags: argparse.Namespace, model: type[Model]) -> Model:
    """`model` from `flags` over the environment over the defaults; a bad value exits naming it."""
    given = {name: value for name, value in vars(flags).items() if name in model.model_fields}
    try:
        return model(**given)
    except ValidationError as error:
        _exit("; ".join(_describe(model, problem, flags=True) for problem in error.errors()))


def check_environment(models: Sequence[type[BaseSettings]]) -> None:
    """Exit 2 naming any malformed variable that `models` read (one left unset is no error)."""
    problems: list[str] = []
    for model in models:
        try:
            model()
        except ValidationError as error:
            problems.extend(
                _describe(model, problem, flags=False)
                for problem in error.errors()
                if problem["type"] != "missing"
            )
    if problems:
        _exit("; ".join(dict.fromkeys(problems)))


def _describe(model: type[BaseModel], problem: ErrorDetails, *, flags: bool) -> str:
    """One validation problem, naming the flag and the variables it could have come from."""
    message = problem["msg"].removeprefix("Value error, ")
    where = str(problem["loc"][0]) if problem["loc"] else ""
    name = next(
        (name for name in model.model_fields if where in (name, *variables_of(model, name))),
        None,
    )
    if name is None:
        return f"{where}: {message}" if where else message
    variables = " or ".join(f"${variable}" for variable in variables_of(model, name))
    named = " / ".join(filter(None, [flag_of(model, name) if flags else "", variables]))
    if problem["type"] == "missing":
        return f"{named}: required"
    if problem["type"] == "value_error":
        return f"{named}: {message}"
    form = form_of(model.model_fields[name])
    return f"{named}: expected {form}, got {redact_url(str(problem.get('input')))!r}"


def _exit(message: str) -> NoReturn:
    print(f"egress-proxies: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    args = build_parser().parse_args(argv)
    if args.command == "run":
        settings = read_options(args, RunSettings)
        drop_trace_context()
        # Imported here: kopf and pulumi take a second to import, dev-cluster needs neither.
        from egress_proxies.operator import main as operator  # noqa: PLC0415

        return operator.run_operator(settings)
    if args.command == "discovery":
        tier_settings = read_options(args, DiscoverySettings)
        check_environment([RunSettings])
        from egress_proxies.tier import app as tier  # noqa: PLC0415

        return tier.run_tier(tier_settings)
    check_environment(ENVIRONMENT_MODELS)
    if args.command == "dev-cluster":
        return _dev_cluster(args)
    if args.command == "crd":
        sys.stdout.write(crd.render_pool() if args.resource == "proxypool" else crd.render())
        return 0
    return 2


def _dev_cluster(args: argparse.Namespace) -> int:
    # Imported here: the dev cluster's PKI (cryptography) has no place in the operator's memory.
    from egress_proxies.devcluster import cluster  # noqa: PLC0415

    if args.action == "up":
        up = read_options(args, DevClusterUpSettings)
        crds = up.crds or cluster.DEFAULT_CRD_DIR
        if up.detach:
            return cluster.run_detached(up.state_dir, crds)
        return cluster.run_foreground(up.state_dir, crds)
    return cluster.stop(read_options(args, DevClusterDownSettings).state_dir)


if __name__ == "__main__":
    sys.exit(main())
