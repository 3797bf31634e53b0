"""Read one environment's YAML file into a ``StackConfig``, or explain every problem in one line each."""

from __future__ import annotations

import difflib
import functools
import typing
from collections.abc import Mapping
from operator import attrgetter
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError

from config.consistency import Problem, Unavailable, consistency_problems, cross_section_problems
from config.model import StackConfig

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
    """Validate already-parsed data; every problem of the file at once.

    First each key's own problems, then the cross-section checks: all of them for a valid file, and
    for an invalid one each check whose keys are valid (``_ValidKeys``).
    """
    if not isinstance(data, Mapping):
        raise ConfigError(source, [("", "the file must hold a mapping of keys (name, account, region, ...)")])
    try:
        config = StackConfig.model_validate(data)
    except ValidationError as error:
        problems = validation_problems(error) + cross_section_problems(_ValidKeys(data, error))
        raise ConfigError(source, problems) from None
    problems = consistency_problems(config)
    if problems:
        raise ConfigError(source, problems)
    return config


# Top-level lists of sections whose checks take the valid items (config/consistency.py: a check
# reading one gets None in place of an item with a problem of its own).
ITEMIZED_LISTS = ("teams", "datasets", "runs")


class _ValidKeys:
    """The validated value of a key of an invalid file, if neither it nor a key around it has a problem.

    pydantic gives no object for a model with an error, so the largest problem-free part around the
    key (the key's whole section if it can) is validated again on its own. ``Unavailable`` otherwise.
    """

    def __init__(self, data: Mapping[str, Any], error: ValidationError) -> None:
        self._data = data
        self._problems = [tuple(detail["loc"]) for detail in error.errors()]

    def __call__(self, path: str) -> Any:
        keys = tuple(path.split("."))
        if len(keys) == 1 and keys[0] in ITEMIZED_LISTS:
            return self._items(keys[0])
        if any(self._touches(location, keys) for location in self._problems):
            raise Unavailable(path)
        model: type[BaseModel] = StackConfig
        raw: Mapping[str, Any] = self._data
        for depth, key in enumerate(keys):
            within = keys[: depth + 1]
            rest = keys[depth + 1 :]
            if not rest or not any(location[: len(within)] == within for location in self._problems):
                value = self._validated(model, key, raw)
                return attrgetter(".".join(rest))(value) if rest else value
            model = _section_model(model, key)
            raw = raw[key]
        raise AssertionError("unreachable: the last key is validated")  # pragma: no cover

    def _items(self, key: str) -> list[Any]:
        """A list of sections with None for each item that has a problem of its own: one bad run
        does not hide what the checks say of the others."""
        if any(
            location[:1] == (key,) and (len(location) == 1 or not isinstance(location[1], int))
            for location in self._problems
        ):
            raise Unavailable(key)  # the list itself is wrong (not a list, too short)
        raw = self._data.get(key)
        if raw is None:
            return list(
                StackConfig.model_fields[key].get_default(call_default_factory=True, validated_data={})
            )
        [item_model] = typing.get_args(StackConfig.model_fields[key].annotation)
        bad = {location[1] for location in self._problems if location[:1] == (key,)}
        return [None if index in bad else item_model.model_validate(item) for index, item in enumerate(raw)]

    @staticmethod
    def _touches(location: tuple[Any, ...], keys: tuple[str, ...]) -> bool:
        """A problem at the key, inside it, or at a key that holds it (a section that is not a mapping)."""
        shorter = min(len(location), len(keys))
        return location[:shorter] == keys[:shorter]

    @staticmethod
    def _validated(model: type[BaseModel], key: str, raw: Mapping[str, Any]) -> Any:
        field = model.model_fields[key]
        if key not in raw:
            return field.get_default(call_default_factory=True, validated_data={})
        try:
            return _field_adapter(model, key).validate_python(raw[key])
        except ValidationError:
            # Valid in the file, but not alone (a validator that needs a sibling key): skip the check.
            raise Unavailable(key) from None


@functools.cache
def _field_adapter(model: type[BaseModel], key: str) -> TypeAdapter[Any]:
    """A validator for one field of ``model``: its type with its constraints and validators (not the model's)."""
    field = model.model_fields[key]
    annotation: Any = field.annotation
    if field.metadata:
        annotation = Annotated[(annotation, *field.metadata)]
    return TypeAdapter(annotation)


def _section_model(model: type[BaseModel], key: str) -> type[BaseModel]:
    annotation = model.model_fields[key].annotation
    assert isinstance(annotation, type) and issubclass(annotation, BaseModel), f"{key} is not a section"
    return annotation


def validation_problems(error: ValidationError, root: type[BaseModel] = StackConfig) -> list[Problem]:
    """pydantic's errors for a file of ``root``'s shape as (key path, message), one per problem."""
    return [_describe(detail, root) for detail in error.errors(include_url=False)]


def _describe(detail: Mapping[str, Any], root: type[BaseModel] = StackConfig) -> Problem:
    location = tuple(detail["loc"])
    if location and location[-1] == "[key]":
        # A mapping key of the wrong type (add-on names): pydantic puts the key and a marker in the path.
        return _dotted(location[:-2]), f"key {location[-2]!r}: {detail['msg']}"
    path = _dotted(location)
    if detail["type"] == "extra_forbidden":
        allowed = _allowed_keys(location[:-1], root)
        close = difflib.get_close_matches(str(location[-1]), allowed, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return path, f"unknown key; {hint}allowed here: {', '.join(allowed)}"
    if detail["type"] == "missing":
        return path, "required key is missing"
    if detail["type"] == "model_type":
        # pydantic's message names the Python class; say what the file needs instead.
        allowed = _allowed_keys(location, root)
        return (
            path,
            f"must be a mapping of keys, got {_yaml_kind(detail['input'])}; allowed keys: {', '.join(allowed)}",
        )
    return path, detail["msg"]


def _yaml_kind(value: object) -> str:
    """How the YAML value reads to the person who wrote it (no Python type names)."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the text {value!r}"
    if isinstance(value, list):
        return "a list"
    return "a value of another kind"


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
    # A retired section (annotated None, kept only to explain the move) is not offered as allowed.
    return [name for name, field in model.model_fields.items() if field.annotation is not type(None)]


def _nested_types(annotation: Any) -> list[Any]:
    found = []
    for argument in typing.get_args(annotation):
        found.append(argument)
        found.extend(_nested_types(argument))
    return found
