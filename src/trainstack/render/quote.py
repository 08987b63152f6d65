"""Quoting for every value a rendered file takes from the stack: shell words, Dockerfile LABELs,
HCL and YAML strings, comments. Pure.

The spec is validated before rendering; these are the second line. A value that no quoting can
keep on one line of a Dockerfile (a control character) is refused with a SpecError instead.
"""

from __future__ import annotations

import json
import re
import shlex

from trainstack import grammar
from trainstack.errors import SpecError


def one_line(value: object, what: str) -> str:
    """``value`` as text, refused when it holds a newline or another control character."""
    text = str(value)
    if grammar.CONTROL.search(text):
        raise SpecError(f"{what}: '{grammar.shown(text)}' holds a control character; it cannot be rendered")
    return text


def shell(value: object, what: str) -> str:
    """One shell word, for a RUN instruction (single line, POSIX-quoted)."""
    return shlex.quote(one_line(value, what))


def matching(value: object, pattern: re.Pattern[str], what: str, accepted: str) -> str:
    """``value`` when it matches ``pattern`` entirely (FROM, stage names, versions), else a SpecError."""
    text = one_line(value, what)
    if not pattern.fullmatch(text):
        raise SpecError(f"{what}: '{grammar.shown(text)}' is not {accepted}; it cannot be rendered")
    return text


def dockerfile_string(value: object) -> str:
    """A double-quoted Dockerfile word (LABEL keys and values): JSON's escaping, which Dockerfile
    quoted strings share, with '$' escaped so that no build variable is substituted."""
    return json.dumps(str(value), ensure_ascii=True).replace("$", "\\$")


def hcl_string(value: object) -> str:
    """An HCL string: JSON's escaping, with HCL's template sequences ${ and %{ escaped."""
    return json.dumps(str(value), ensure_ascii=True).replace("${", "$${").replace("%{", "%%{")


def yaml_string(value: object) -> str:
    """A YAML double-quoted scalar. YAML's double-quoted style takes JSON's escapes (JSON is YAML);
    with every non-ASCII character escaped, no line break of any kind is left in the text."""
    return json.dumps(str(value), ensure_ascii=True)


def comment(value: object) -> str:
    """Text for a '#' comment: control characters shown escaped, so it stays one line."""
    return grammar.shown(value, 200)
