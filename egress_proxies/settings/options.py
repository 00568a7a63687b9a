"""An option: one field that gives a flag, its environment variables, a default and its help.

A model of options is a pydantic-settings class whose fields are declared
with `option()`. Each field's flag is `--field-name` unless the field or the
command's model says otherwise (`flags`), and its variables are
`EGRESS_PROXIES_` + the field name in capitals unless the field lists its
own. A flag beats its variable, which beats the default; an empty variable
counts as unset.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from pydantic import AliasChoices, BaseModel, Field
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "EGRESS_PROXIES_"
REQUIRED: Any = PydanticUndefined


class Options(BaseSettings):
    """Options read from `EGRESS_PROXIES_*` variables, overridden by flags."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_ignore_empty=True,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
    )

    # The heading of the model's own options in --help.
    title: ClassVar[str] = "options"
    # A command whose flags differ from the field names' (field name -> flag).
    flags: ClassVar[Mapping[str, str]] = {}


def option(
    default: Any,
    description: str,
    *,
    env: tuple[str, ...] = (),
    flag: str | None = None,
    **constraints: Any,
) -> Any:
    """A field of an options model: `env` replaces the default variable name, `flag` the flag."""
    return Field(
        default,
        description=description,
        validation_alias=AliasChoices(*env) if env else None,
        json_schema_extra={"flag": flag} if flag is not None else None,
        **constraints,
    )


def seconds(name: str) -> tuple[str, ...]:
    """The variable of a duration option: `EGRESS_PROXIES_<NAME>_SECONDS`."""
    return (f"{ENV_PREFIX}{name}_SECONDS",)


def flag_of(model: type[BaseModel], name: str) -> str:
    """The command-line flag of field `name` of `model`."""
    overrides: Mapping[str, str] = getattr(model, "flags", {})
    if name in overrides:
        return overrides[name]
    extra = model.model_fields[name].json_schema_extra
    if isinstance(extra, dict) and isinstance(extra.get("flag"), str):
        return str(extra["flag"])
    return "--" + name.replace("_", "-")


def variables_of(model: type[BaseModel], name: str) -> tuple[str, ...]:
    """The environment variables field `name` of `model` reads, the first one winning."""
    if not issubclass(model, BaseSettings):
        return ()
    alias = model.model_fields[name].validation_alias
    if isinstance(alias, AliasChoices):
        return tuple(str(choice) for choice in alias.choices)
    return (ENV_PREFIX + name.upper(),)


def form_of(info: FieldInfo) -> str:
    """What a field accepts, as an error message says it: "an integer 0-65535"."""
    kinds = [kind for kind in _kinds(info.annotation) if kind is not type(None)]
    kind = kinds[0] if len(kinds) == 1 else str
    if kind is bool:
        return "true or false"
    if kind is Path:
        return "a path"
    if typing.get_origin(kind) is list:
        return "a comma-separated list"
    if kind in (int, float):
        return ("an integer" if kind is int else "a number") + _range(info)
    return "non-empty text" if _bound(info, "min_length") else "text"


def _kinds(annotation: Any) -> tuple[Any, ...]:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Annotated:
        return (typing.get_args(annotation)[0],)
    return (annotation,)


def _range(info: FieldInfo) -> str:
    low, above, high = (_bound(info, name) for name in ("ge", "gt", "le"))
    if low is not None and high is not None:
        return f" {low}-{high}"
    if above is not None:
        return f" above {above}"
    if low is not None:
        return f" of at least {low}"
    return ""


def _bound(info: FieldInfo, name: str) -> Any:
    """A constraint of the field (pydantic keeps `ge=0` as an annotated-types `Ge(0)`)."""
    return next((getattr(m, name) for m in info.metadata if hasattr(m, name)), None)
