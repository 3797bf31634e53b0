"""Read one environment's YAML file into a ``StackConfig``, or explain every problem in one line each."""

from __future__ import annotations

import difflib
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from config.model import StackConfig, consistency_problems

__all__ = ["DEFAULT_CONFIG", "ConfigError", "load_config", "parse_config", "read_yaml", "validation_problems"]

DEFAULT_CONFIG = Path(__file__).with_name("default.yaml")


class ConfigError(Exception):
    """A configuration that must not reach the constructs; ``lines()`` is what the user reads."""

    def __init__(self, source: str, problems: list[tuple[str, str]]) -> None:
        self.source = source
        self.problems = problems
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        return [
            f"{self.source}: {path}: {message}" if path else f"{self.source}: {message}"
            for path, message in self.problems
        ]


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys silently; a repeated key is almost always a mistake."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_config(path: str | Path) -> StackConfig:
    """Load and validate ``path``; raise ``ConfigError`` for anything wrong, the file included."""
    return parse_config(read_yaml(path), source=str(path))


def read_yaml(path: str | Path) -> Any:
    """The YAML data of ``path`` (keys unique); ``ConfigError`` if the file is absent, unreadable or not YAML."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(source, [("", "configuration file not found")]) from None
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise ConfigError(source, [("", f"configuration file cannot be read: {reason}")]) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error)
        raise ConfigError(source, [("", f"not valid YAML: {where}{problem}")]) from None
    return data


def parse_config(data: object, *, source: str = "<config>") -> StackConfig:
    """Validate already-parsed data; every field problem first, then the cross-section checks."""
    if not isinstance(data, Mapping):
        raise ConfigError(source, [("", "the file must hold a mapping of keys (name, account, region, ...)")])
    try:
        config = StackConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(source, validation_problems(error)) from None
    problems = consistency_problems(config)
    if problems:
        raise ConfigError(source, problems)
    return config


def validation_problems(error: ValidationError, root: type[BaseModel] = StackConfig) -> list[tuple[str, str]]:
    """pydantic's errors for a file of ``root``'s shape as (key path, message), one per problem."""
    return [_describe(detail, root) for detail in error.errors(include_url=False)]


def _describe(detail: Mapping[str, Any], root: type[BaseModel] = StackConfig) -> tuple[str, str]:
    location = tuple(detail["loc"])
    path = _dotted(location)
    if detail["type"] == "extra_forbidden":
        allowed = _allowed_keys(location[:-1], root)
        close = difflib.get_close_matches(str(location[-1]), allowed, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return path, f"unknown key; {hint}allowed here: {', '.join(allowed)}"
    if detail["type"] == "missing":
        return path, "required key is missing"
    return path, detail["msg"]


def _dotted(location: tuple[Any, ...]) -> str:
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _allowed_keys(location: tuple[Any, ...], root: type[BaseModel] = StackConfig) -> list[str]:
    """The keys the model at ``location`` accepts (walking list items and optional sections)."""
    model: type[BaseModel] = root
    for part in location:
        if isinstance(part, int):
            continue
        annotation = model.model_fields[part].annotation
        model = next(
            candidate
            for candidate in (annotation, *_nested_types(annotation))
            if isinstance(candidate, type) and issubclass(candidate, BaseModel)
        )
    return list(model.model_fields)


def _nested_types(annotation: Any) -> list[Any]:
    found = []
    for argument in typing.get_args(annotation):
        found.append(argument)
        found.extend(_nested_types(argument))
    return found
