"""Libraries deleted from copies of real venvs, each caught by `trainstack linkcheck` (its
findings confirmed inside the copy's interpreter) with exit 1 and the chain that needs it,
and the healthy venvs passing; `report` on the copy without cuDNN's conv engine.

Usage: python benchmarks/linkcheck_deletions.py VENV=NAME[,NAME...] ... [--out FILE]
Each VENV is copied with hard links (no data copied), once per NAME (a path under its
site-packages, glob allowed), that file deleted from the copy.
Example: python benchmarks/linkcheck_deletions.py
    cu130=nvidia/cudnn/lib/libcudnn_cnn.so.9,nvidia/nccl/lib/libnccl.so.2 cpu=numpy.libs/*.so
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from trainstack import proc


def site(venv: Path) -> Path:
    return next((venv / "lib").glob("python3.*/site-packages"))


def linkcheck(venv: Path) -> tuple[int, dict]:
    result = proc.run([sys.executable, "-m", "trainstack.cli", "linkcheck", "--json", venv], echo=False)
    return result.returncode, json.loads(result.stdout)


def describe(code: int, report: dict) -> list[str]:
    broken = [i for i in report["issues"] if i["severity"] == "error"]
    lines = [f"  exit {code}; {len(broken)} error(s); {report['confirmation']}"]
    seen: set[str] = set()
    for issue in broken:
        if issue["library"] in seen:
            continue
        seen.add(issue["library"])
        chain = " → ".join([*(Path(p).name for p in issue["chain"] or [issue["file"]]), issue["library"]])
        lines.append(f"  {issue['status'] or issue['kind']}: {chain}")
        lines.append(f"    why: {issue['reason'] or issue['detail']}")
        lines.append(f"    provided by: {issue['provider'] or '-'}")
    return lines


def report_errors(venv: Path) -> str:
    result = proc.run([sys.executable, "-m", "trainstack.cli", "report", "--python", venv / "bin" / "python", "--json"],
                      echo=False)
    try:
        return json.dumps(json.loads(result.stdout).get("errors", {}))
    except json.JSONDecodeError:
        return f"report exit {result.returncode}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("cases", nargs="+", help="VENV=NAME[,NAME...]")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    lines: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.cases:
            venv_text, _, names = case.partition("=")
            venv = Path(venv_text)
            code, report = linkcheck(venv)
            lines += [f"{venv} (healthy):", *describe(code, report)]
            for name in names.split(","):
                copy = Path(tmp) / f"copy-{len(lines)}"
                shutil.copytree(venv, copy, symlinks=True, copy_function=os.link)
                victims = sorted(site(copy).glob(name))
                for victim in victims:
                    victim.unlink()
                code, report = linkcheck(copy)
                lines += [f"{venv} without {', '.join(str(v.relative_to(site(copy))) for v in victims)}:",
                          *describe(code, report)]
                if "libcudnn_cnn" in name:
                    lines.append(f"  report errors: {report_errors(copy)}")
                shutil.rmtree(copy)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
