"""Configs cross processes as JSON, never as argv: the other side rebuilds the dataclass (its checks run
again)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, TypeVar

from tfdist.errors import ConfigError

T = TypeVar("T")


def to_json(config: Any) -> str:
    """``config`` (a dataclass instance) as one line of JSON; tuples become lists."""
    return json.dumps(dataclasses.asdict(config), sort_keys=True)


def from_json(cls: type[T], text: str, where: str = "JSON") -> T:
    """The ``cls`` instance ``text`` describes; ConfigError naming ``where`` when it does not fit."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno}).") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a JSON object, got {type(data).__name__}.")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)} for {cls.__name__}.")
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
    return cls(**values)
