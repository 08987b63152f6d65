"""The dlopen, host-driver and plugin data shipped in trainstack/verify/data/dlopen.toml."""

from __future__ import annotations

import sys
from fnmatch import fnmatch
from functools import lru_cache
from importlib import resources

from pydantic import BaseModel, ConfigDict

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only: tomllib is in the standard library from 3.11
    import tomli as tomllib


class DlopenRule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    owner: str
    loads: list[str]
    optional: bool = False
    own_dir: bool = False  # the owner opens it by a path next to itself (dladdr), not by search
    reason: str
    link: str = ""


class HostLibs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    driver: list[str]
    link: str = ""


class Plugins(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    patterns: list[str]
    reason: str


class Provider(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    library: str  # fnmatch pattern of the library name
    package: str


class OptionalPart(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    object: str  # fnmatch pattern of the object's path
    what: str


class DlopenData(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    dlopen: list[DlopenRule]
    host: HostLibs
    plugins: Plugins
    provider: list[Provider] = []
    optional: list[OptionalPart] = []

    def provider_of(self, library: str) -> str:
        return next((p.package for p in self.provider if fnmatch(library, p.library)), "")

    def optional_part(self, path: str) -> str:
        return next((o.what for o in self.optional if fnmatch(path, o.object)), "")

    def rules_for(self, soname: str) -> list[DlopenRule]:
        return [rule for rule in self.dlopen if fnmatch(soname, rule.owner)]

    def is_driver(self, name: str) -> bool:
        return name in self.host.driver

    def is_plugin(self, filename: str) -> bool:
        return any(fnmatch(filename, pattern) for pattern in self.plugins.patterns)


@lru_cache(maxsize=1)
def load_data() -> DlopenData:
    text = resources.files("trainstack.verify").joinpath("data/dlopen.toml").read_text(encoding="utf-8")
    return DlopenData.model_validate(tomllib.loads(text))
