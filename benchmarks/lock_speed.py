"""Time to lock examples/stacks/torch-cuda.toml: uv (through trainstack and bare) against
pip-tools' pip-compile on the same requirements, cold (empty caches) and warm.

The flavour is the one PyPI serves (cu130, ubuntu24.04, Python 3.11: the interpreter
pip-compile runs on, since pip-compile resolves for its own Python only). pip-compile
cannot be handed sdist metadata, so both tools also get the same plain requirement list:
the flavour's components with the sdist-only ones replaced by their Requires-Dist.

Usage: python benchmarks/lock_speed.py [--repeat N] [--pip-repeat N]

Writes benchmarks/results/lock_speed/lock_speed.txt (the printed table) and lock_speed.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from resultfile import Run
from trainstack.lock.requests import flavour_requests
from trainstack.stackfile import Flavour, load_stack

ROOT = Path(__file__).resolve().parent.parent
STACK = ROOT / "examples" / "stacks" / "torch-cuda.toml"
FLAVOUR = Flavour("13.0", "ubuntu24.04", "3.11", "release")


def plain_requirements() -> list[str]:
    plan = flavour_requests(load_stack(STACK), FLAVOUR)
    static = {m.name for m in plan.full.metadata}
    lines = [r for r in plan.full.requirements if r.split("=")[0].split("[")[0] not in static]
    lines += [dep for m in plan.full.metadata for dep in m.requires_dist]
    return sorted(set(lines))


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    result = subprocess.run(argv, env={**os.environ, **env}, cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"failed: {' '.join(argv)}\n{result.stderr[-2000:]}")
    return seconds


def trainstack_lock(work: Path, cache: Path) -> float:
    stack = work / "torch-cuda.toml"
    shutil.copyfile(STACK, stack)
    shutil.rmtree(work / "torch-cuda.lock", ignore_errors=True)  # no previous lock: resolve from scratch
    argv = [sys.executable, "-m", "trainstack.cli", "lock", str(stack), "--flavour", FLAVOUR.slug]
    return timed(argv, {"UV_CACHE_DIR": str(cache)}, work)


def uv_compile(work: Path, cache: Path) -> float:
    argv = ["uv", "pip", "compile", "in.txt", "-o", "uv.txt", "--generate-hashes", "--no-config", "--quiet",
            "--python-version", FLAVOUR.python, "--python-platform", "x86_64-manylinux_2_39"]
    (work / "uv.txt").unlink(missing_ok=True)
    return timed(argv, {"UV_CACHE_DIR": str(cache)}, work)


def pip_compile(work: Path, cache: Path) -> float:
    argv = ["pip-compile", "in.txt", "-o", "pip.txt", "--generate-hashes", "--quiet", "--strip-extras",
            "--index-url", "https://pypi.org/simple", "--cache-dir", str(cache / "pip-tools")]
    (work / "pip.txt").unlink(missing_ok=True)
    env = {"PIP_CACHE_DIR": str(cache / "pip"), "PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": ""}
    return timed(argv, env, work)


def measure(name: str, run, work: Path, repeat: int) -> tuple[float, list[float]]:
    """The cold run (empty cache) and every warm run after it."""
    cache = Path(tempfile.mkdtemp(prefix=f"cache-{name}-", dir=work))
    cold = run(work, cache)
    return cold, [run(work, cache) for _ in range(repeat)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="warm runs (median is printed)")
    parser.add_argument("--pip-repeat", type=int, help="warm runs of pip-compile (default: --repeat; it takes minutes each)")
    args = parser.parse_args()
    run = Run("lock_speed")
    with tempfile.TemporaryDirectory(prefix="lock-speed-") as tmp:
        work = Path(tmp)
        requirements = plain_requirements()
        (work / "in.txt").write_text("\n".join(requirements) + "\n")
        lines = [f"stack {STACK.name}, flavour {FLAVOUR.slug}, {len(requirements)} top-level requirements; "
                 f"cold = empty cache, warm = median of the runs after it"]
        print(lines[0], flush=True)
        rows = {
            "trainstack lock (uv)": measure("trainstack", trainstack_lock, work, args.repeat),
            "uv pip compile": measure("uv", uv_compile, work, args.repeat),
            "pip-compile": measure("pip", pip_compile, work, args.pip_repeat or args.repeat),
        }
    medians = {name: (cold, statistics.median(warm)) for name, (cold, warm) in rows.items()}
    uv_cold, uv_warm = medians["uv pip compile"]
    lines.append(f"{'tool':<22}{'cold s':>9}{'warm s':>9}{'cold/uv':>9}{'warm/uv':>9}{'warm runs':>10}")
    for name, (cold, warm) in medians.items():
        lines.append(f"{name:<22}{cold:>9.2f}{warm:>9.2f}{cold / uv_cold:>9.2f}{warm / uv_warm:>9.2f}{len(rows[name][1]):>10}")
    pip_cold, pip_warm = medians["pip-compile"]
    lines.append(f"pip-compile takes {pip_cold / uv_cold:.1f}x uv's time cold and {pip_warm / uv_warm:.1f}x warm")
    print("\n".join(lines[1:]))
    figures = {name: {"cold_s": round(cold, 2), "warm_s": [round(w, 2) for w in warm],
                      "warm_median_s": round(medians[name][1], 2),
                      "cold_over_uv": round(cold / uv_cold, 2), "warm_over_uv": round(medians[name][1] / uv_warm, 2)}
               for name, (cold, warm) in rows.items()}
    run.write("\n".join(lines), {"stack": STACK.name, "flavour": FLAVOUR.slug,
                                 "top_level_requirements": len(requirements), "tools": figures})


if __name__ == "__main__":
    main()
