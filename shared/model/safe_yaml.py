"""YAML from files pykubelet reads (its config, static pod manifests): safe loading only, with
libyaml's C parser where PyYAML has it (its wheels do). The pure-Python parser is a few thousand
lines of Python run for every file: slower, and in each forked service ~0.4 MiB of shared pages
copied for nothing."""

from __future__ import annotations

from typing import Any, Iterator

import yaml

LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load(text: str) -> Any:
    return yaml.load(text, Loader=LOADER)


def load_all(text: str) -> Iterator[Any]:
    return yaml.load_all(text, Loader=LOADER)


def events(text: str) -> Iterator[yaml.Event]:
    return yaml.parse(text, Loader=LOADER)
