"""Build speed, measured: trainstack's venv build (uv) next to plain `pip install -r` of the same lock,
cold and warm; and an OCI rebuild after bumping one extra next to a full OCI build.

    python benchmarks/build_speed.py [--venv-stack S --venv-flavour F] [--oci-stack S] [--skip-venv] [--skip-oci]

Prints each figure in seconds and the ratios. Cold = empty download/wheel cache; warm = the cache
the cold run filled. The OCI figures use their own containers store (created and removed here).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "stacks"


def timed(argv: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    result = subprocess.run(argv, env={**os.environ, **(env or {})}, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"failed ({result.returncode}): {' '.join(argv)}\n{result.stderr[-2000:]}")
    return seconds


def lock(stack: Path, flavour: str | None) -> Path:
    from trainstack.lock import lock_stack

    manifest = lock_stack(stack, flavour=flavour)
    slug = flavour or next(iter(manifest.flavours))
    return stack.parent / f"{stack.stem}.lock" / manifest.flavours[slug].lock_file


def trainstack_build(stack: Path, flavour: str, build: Path, env: dict[str, str], *extra: str) -> float:
    argv = [sys.executable, "-m", "trainstack.cli", "build", str(stack), "--flavour", flavour, "--build-dir", str(build)]
    return timed([*argv, "--skip-sources", "--force", *extra], env)


def pip_install(lock_file: Path, venv: Path, python: str, env: dict[str, str], sources: set[str]) -> float:
    """A plain venv + pip install of the same lock (minus source builds, as --skip-sources does)."""
    shutil.rmtree(venv, ignore_errors=True)
    requirements = venv.parent / f"{venv.name}.txt"
    blocks = lock_file.read_text().split("\n")
    keep, skipping = [], False
    for line in blocks:
        if line and not line[0].isspace() and not line.startswith(("#", "--")):
            skipping = line.split("==")[0].split(" @ ")[0].strip().lower() in sources
        if not skipping:
            keep.append(line)
    requirements.write_text("\n".join(keep))
    start = time.perf_counter()
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--require-hashes", "-r", str(requirements)]
    subprocess.run(pip, check=True, env={**os.environ, **env})
    return time.perf_counter() - start


def venv_figures(stack_name: str, flavour: str, work: Path) -> None:
    from trainstack.render.layers import needs_build
    from trainstack.spec import load_stack

    stack = work / f"{stack_name}.toml"
    shutil.copyfile(EXAMPLES / f"{stack_name}.toml", stack)
    lock_file = lock(stack, flavour)
    sources = {c.key for c in load_stack(stack).components.values() if needs_build(c)}
    uv_env = {"UV_CACHE_DIR": str(work / "uv-cache")}
    pip_env = {"PIP_CACHE_DIR": str(work / "pip-cache")}
    cold = trainstack_build(stack, flavour, work / "b1", uv_env)
    warm = trainstack_build(stack, flavour, work / "b2", uv_env)
    pip_cold = pip_install(lock_file, work / "pip1", sys.executable, pip_env, sources)
    pip_warm = pip_install(lock_file, work / "pip2", sys.executable, pip_env, sources)
    print(f"venv build of {stack_name} / {flavour} (source components left out)")
    print(f"  {'':28}{'trainstack (uv)':>16}{'pip install -r':>16}{'ratio pip/uv':>14}")
    print(f"  {'cold (empty cache)':28}{cold:>15.1f}s{pip_cold:>15.1f}s{pip_cold / cold:>13.1f}x")
    print(f"  {'warm (cache filled)':28}{warm:>15.1f}s{pip_warm:>15.1f}s{pip_warm / warm:>13.1f}x")


def oci_figures(stack_name: str, bump: tuple[str, str], work: Path) -> None:
    store = work / "containers"
    conf = work / "storage.conf"
    conf.write_text(f'[storage]\ndriver = ""\ngraphroot = "{store}/graph"\nrunroot = "{store}/run"\n')
    env = {"CONTAINERS_STORAGE_CONF": str(conf)}
    stack = work / f"{stack_name}.toml"
    shutil.copyfile(EXAMPLES / f"{stack_name}.toml", stack)
    lock(stack, None)
    argv = [sys.executable, "-m", "trainstack.cli", "build", str(stack), "--backend", "oci", "--build-dir", str(work / "b")]
    full_with_base = timed([*argv, "--force"], env)
    from trainstack.build.oci import BuildahBackend

    driver = BuildahBackend().driver
    subprocess.run(["buildah", "--storage-driver", driver, "rmi", "--all", "--force"], env={**os.environ, **env}, capture_output=True)
    full = timed([*argv, "--force"], env)  # everything again, including the debootstrap base
    text = stack.read_text()
    assert bump[0] in text, bump[0]
    stack.write_text(text.replace(bump[0], bump[1]))
    lock(stack, None)
    bumped = timed(argv, env)
    subprocess.run(["buildah", "--storage-driver", driver, "rmi", "--all", "--force"], env={**os.environ, **env}, capture_output=True)
    print(f"OCI build of {stack_name} (buildah, {driver})")
    print(f"  full build, empty store          {full_with_base:8.1f}s (first run) {full:8.1f}s (second run)")
    print(f"  rebuild after bumping one extra  {bumped:8.1f}s")
    print(f"  ratio full/rebuild               {full / bumped:8.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv-stack", default="torch-cuda")
    parser.add_argument("--venv-flavour", default="cu130-ubuntu2404-py311-release")
    parser.add_argument("--oci-stack", default="cpu-minimal")
    parser.add_argument("--bump-from", default='hypothesis = ">=6.100"')
    parser.add_argument("--bump-to", default='hypothesis = ">=6.100,<6.150"')
    parser.add_argument("--skip-venv", action="store_true")
    parser.add_argument("--skip-oci", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="trainstack-bench-") as tmp:
        work = Path(tmp)
        if not args.skip_venv:
            (work / "venv").mkdir()
            venv_figures(args.venv_stack, args.venv_flavour, work / "venv")
        if not args.skip_oci:
            (work / "oci").mkdir()
            oci_figures(args.oci_stack, (args.bump_from, args.bump_to), work / "oci")


if __name__ == "__main__":
    main()
