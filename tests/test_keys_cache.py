"""Cache-key properties: distinct per flavour, stable for unchanged inputs, and moved by a
component change for exactly the flavours whose lock changed."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from trainstack.cli import main
from trainstack.errors import LockError
from trainstack.lock import TEMPLATE_VERSION, cache_key, lock_stack

KEY = re.compile(r"^[a-z0-9._-]+-[a-z0-9-]+-[0-9a-f]{12}$")

TWO_PYTHONS = """\
[stack]
name = "keys"
release = "1"
image = "trainstack/keys"
registry = "registry.example.com/ml"

[components]
packaging = "==24.2"
idna = {{ version = "{idna}", when = {{ python = ">=3.12" }} }}

[matrix]
cuda = ["cpu"]
os = ["debian12"]
python = ["3.11", "3.12"]

[toolchain]
packages = []

[build]
base = {{ debian12 = "debootstrap:bookworm" }}
"""


def key(**changes) -> str:
    inputs = dict(image="r/ml/img", slug="cpu-debian12-py311-release", base_image="debian:12",
                  lock_bytes=b"numpy==2.0\n", build_args={"a": "1"})
    inputs.update(changes)
    return cache_key(**inputs)


def test_key_format_and_every_input_counts() -> None:
    base = key()
    assert KEY.match(base) and base.startswith("img-cpu-debian12-py311-release-")
    assert key() == base
    for change in (
        {"slug": "cpu-debian12-py312-release"},
        {"base_image": "debian:13"},
        {"lock_bytes": b"numpy==2.1\n"},
        {"build_args": {"a": "2"}},
        {"image": "r/other/img"},
        {"template_version": TEMPLATE_VERSION + "x"},
    ):
        assert key(**change) != base, change


@given(st.binary(max_size=64), st.binary(max_size=64), st.dictionaries(st.text(max_size=5), st.text(max_size=5)))
@settings(max_examples=200, deadline=None)
def test_key_is_a_function_of_its_inputs(lock_a: bytes, lock_b: bytes, args: dict) -> None:
    a, b = key(lock_bytes=lock_a, build_args=args), key(lock_bytes=lock_b, build_args=dict(reversed(args.items())))
    assert KEY.match(a)
    assert (a == b) == (lock_a == lock_b)


def _keys(stack: Path) -> dict[str, str]:
    return {slug: f.cache_key for slug, f in lock_stack(stack).flavours.items()}


def test_component_change_moves_exactly_the_keys_of_flavours_whose_lock_changed(write_stack) -> None:
    stack = write_stack(TWO_PYTHONS.format(idna="==3.7"))
    first = _keys(stack)
    assert len(set(first.values())) == len(first) == 2  # flavours never share a key
    assert _keys(stack) == first  # unchanged inputs, same keys
    stack.write_text(TWO_PYTHONS.format(idna="==3.8"))
    second = _keys(stack)
    assert second["cpu-debian12-py311-release"] == first["cpu-debian12-py311-release"]
    assert second["cpu-debian12-py312-release"] != first["cpu-debian12-py312-release"]


def test_keys_verb_refuses_a_stale_lock(write_stack, capsys) -> None:
    stack = write_stack(TWO_PYTHONS.format(idna="==3.7"))
    lock_stack(stack)
    assert main(["keys", str(stack), "--flavour", "cpu-debian12-py311-release"]) == 0
    assert capsys.readouterr().out.strip().startswith("keys-cpu-debian12-py311-release-")
    stack.write_text(TWO_PYTHONS.format(idna="==3.8"))
    assert main(["keys", str(stack)]) == LockError.exit_code
    assert "re-lock with 'trainstack lock" in capsys.readouterr().err


def test_the_stack_file_name_moves_no_lock_byte_and_no_key(tmp_path: Path) -> None:
    locks = {}
    for name in ("stack.toml", "renamed-release.toml"):
        folder = tmp_path / name.split(".")[0]
        folder.mkdir()
        stack = folder / name
        stack.write_text(TWO_PYTHONS.format(idna="==3.7"))
        manifest = lock_stack(stack)
        lock_folder = stack.parent / f"{stack.stem}.lock"
        texts = {p.relative_to(lock_folder): p.read_bytes() for p in sorted(lock_folder.rglob("*.txt"))}
        assert texts and all(name.encode() not in text for text in texts.values())
        locks[name] = (texts, {slug: f.cache_key for slug, f in manifest.flavours.items()})
        again = lock_stack(stack)  # re-locking is byte-stable
        assert {p.relative_to(lock_folder): p.read_bytes() for p in sorted(lock_folder.rglob("*.txt"))} == texts
        assert {slug: f.cache_key for slug, f in again.flavours.items()} == locks[name][1]
    assert locks["stack.toml"] == locks["renamed-release.toml"]
    # what the release notes diff besides versions is recorded too
    flavour = manifest.flavours["cpu-debian12-py311-release"]
    assert flavour.base_image == "debootstrap:bookworm"
    assert flavour.build_settings["compiler_cache"] == "ccache 10G"
