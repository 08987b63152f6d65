"""Build speed, measured: trainstack's venv build (uv) next to plain `pip install -r` of the same lock,
cold and warm; and an OCI rebuild after bumping one extra next to a full OCI build.

    python benchmarks/build_speed.py [--venv-stack S --venv-flavour F] [--oci-stack S] [--skip-venv] [--skip-oci]
                                     [--skip-quickstart]

Prints each figure in seconds and the ratios. Cold = empty download/wheel cache; warm = the cache
the cold run filled. The OCI figures use their own containers store (created and removed here).
The quickstart figures time the README's first command (lock, build and verify of cpu-minimal)
in a copy of the examples, with the uv cache the user already has. The printed text and the
figures go to benchmarks/results/build_speed/build_speed.txt and build_speed.json.
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

from resultfile import Run

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


def venv_figures(stack_name: str, flavour: str, work: Path) -> tuple[list[str], dict]:
    from trainstack.lock.layers import needs_build
    from trainstack.stackfile import load_stack

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
    lines = [
        f"venv build of {stack_name} / {flavour} (source components left out)",
        f"  {'':28}{'trainstack (uv)':>16}{'pip install -r':>16}{'ratio pip/uv':>14}",
        f"  {'cold (empty cache)':28}{cold:>15.1f}s{pip_cold:>15.1f}s{pip_cold / cold:>13.1f}x",
        f"  {'warm (cache filled)':28}{warm:>15.1f}s{pip_warm:>15.1f}s{pip_warm / warm:>13.1f}x",
    ]
    print("\n".join(lines), flush=True)
    return lines, {"stack": stack_name, "flavour": flavour, "trainstack_cold_s": round(cold, 1),
                   "trainstack_warm_s": round(warm, 1), "pip_cold_s": round(pip_cold, 1), "pip_warm_s": round(pip_warm, 1),
                   "pip_over_trainstack_cold": round(pip_cold / cold, 1), "pip_over_trainstack_warm": round(pip_warm / warm, 1)}


def oci_figures(stack_name: str, bump: tuple[str, str], work: Path) -> tuple[list[str], dict]:
    store = work / "containers"
    conf = work / "storage.conf"
    conf.write_text(f'[storage]\ndriver = ""\ngraphroot = "{store}/graph"\nrunroot = "{store}/run"\n')
    env = {"CONTAINERS_STORAGE_CONF": str(conf)}
    stack = work / f"{stack_name}.toml"
    shutil.copyfile(EXAMPLES / f"{stack_name}.toml", stack)
    lock(stack, None)
    argv = [sys.executable, "-m", "trainstack.cli", "build", str(stack), "--backend", "oci", "--build-dir", str(work / "b")]
    full_with_base = timed([*argv, "--force"], env)
    from trainstack.builder.oci import BuildahBackend

    driver = BuildahBackend().driver
    subprocess.run(["buildah", "--storage-driver", driver, "rmi", "--all", "--force"], env={**os.environ, **env}, capture_output=True)
    full = timed([*argv, "--force"], env)  # everything again, including the debootstrap base
    text = stack.read_text()
    assert bump[0] in text, bump[0]
    stack.write_text(text.replace(bump[0], bump[1]))
    lock(stack, None)
    bumped = timed(argv, env)
    subprocess.run(["buildah", "--storage-driver", driver, "rmi", "--all", "--force"], env={**os.environ, **env}, capture_output=True)
    lines = [
        f"OCI build of {stack_name} (buildah, {driver})",
        f"  full build, empty store          {full_with_base:8.1f}s (first run) {full:8.1f}s (second run)",
        f"  rebuild after bumping one extra  {bumped:8.1f}s ({bump[0]} -> {bump[1]})",
        f"  ratio full/rebuild               {full / bumped:8.1f}x",
    ]
    print("\n".join(lines), flush=True)
    return lines, {"stack": stack_name, "driver": driver, "full_first_s": round(full_with_base, 1),
                   "full_second_s": round(full, 1), "rebuild_after_bump_s": round(bumped, 1),
                   "full_over_rebuild": round(full / bumped, 1), "bump": list(bump)}


def quickstart_figures(work: Path) -> tuple[list[str], dict]:
    """The README's first command after the install: lock, build and verify of cpu-minimal."""
    shutil.copytree(ROOT / "examples", work / "examples")
    stack = "examples/stacks/cpu-minimal.toml"
    seconds = {}
    for verb in ("lock", "build", "verify"):
        start = time.perf_counter()
        result = subprocess.run([sys.executable, "-m", "trainstack.cli", verb, stack], cwd=work, capture_output=True, text=True)
        seconds[verb] = time.perf_counter() - start
        if result.returncode != 0:
            sys.exit(f"failed ({result.returncode}): trainstack {verb} {stack}\n{result.stderr[-2000:]}")
    total = sum(seconds.values())
    lines = [
        f"README's first command: trainstack lock, build and verify {stack} (the uv cache as it is)",
        "  " + ", ".join(f"{verb} {s:.1f}s" for verb, s in seconds.items()) + f"; in all {total:.1f}s",
    ]
    print("\n".join(lines), flush=True)
    return lines, {"stack": stack, **{f"{verb}_s": round(s, 1) for verb, s in seconds.items()}, "total_s": round(total, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv-stack", default="torch-cuda")
    parser.add_argument("--venv-flavour", default="cu130-ubuntu2404-py311-release")
    parser.add_argument("--oci-stack", default="cpu-minimal")
    parser.add_argument("--bump-from", default='hypothesis = ">=6.100"')
    parser.add_argument("--bump-to", default='hypothesis = ">=6.100,<6.150"')
    parser.add_argument("--skip-venv", action="store_true")
    parser.add_argument("--skip-oci", action="store_true")
    parser.add_argument("--skip-quickstart", action="store_true")
    args = parser.parse_args()
    run = Run("build_speed")
    lines: list[str] = []
    figures: dict = {}
    with tempfile.TemporaryDirectory(prefix="trainstack-bench-") as tmp:
        work = Path(tmp)
        parts = {
            "venv": (args.skip_venv, lambda w: venv_figures(args.venv_stack, args.venv_flavour, w)),
            "oci": (args.skip_oci, lambda w: oci_figures(args.oci_stack, (args.bump_from, args.bump_to), w)),
            "quickstart": (args.skip_quickstart, quickstart_figures),
        }
        for name, (skip, measure) in parts.items():
            if skip:
                continue
            (work / name).mkdir()
            part_lines, figures[name] = measure(work / name)
            lines += part_lines
    run.write("\n".join(lines), figures)


if __name__ == "__main__":
    main()
