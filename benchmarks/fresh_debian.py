"""The README's two commands on a fresh Debian 12, Debian 13 or Ubuntu 24.04, run as written: a new
root made with debootstrap, a clean checkout (git archive HEAD) copied in, then inside it (chroot)
the README's first command (bootstrap, lock, build, verify) and, unless --skip-tests, its second
(bash .ci/run: the whole test suite as CI runs it).

    sudo python3 benchmarks/fresh_debian.py [--suite bookworm|trixie|noble] [--tests-k EXPR | --skip-tests]
                                            [--find-links DIR] [--keep]

Needs root (debootstrap, chroot, mounts); noble needs Ubuntu's archive keyring (the ubuntu-keyring
package of Debian) or --no-check-gpg. The new root starts with what debootstrap's minbase
variant holds and ca-certificates: no Python at all, no pip, no venv, no compiler, no pip
configuration; the first command's bootstrap installs what it needs. The host's CA bundle is
copied into its trust store and the proxy and CA variables of this environment are passed
through, so that a machine behind a TLS-intercepting proxy can reach PyPI; nothing else of the
host goes in.

--tests-k EXPR runs the second command as `bash .ci/run -k EXPR`: .ci/run hands its arguments
to pytest after the README's test command, so only that subset of the suite runs (not
PYTEST_ADDOPTS: verify's own test suites, run inside the tests, would read it too). --find-links DIR mounts DIR read-only in the root and sets
PIP_FIND_LINKS to it for the second command: a local wheel folder standing in for PyTorch's
CPU-only index where that index cannot be reached.

Each command's seconds, exit status and last output go to benchmarks/results/fresh_debian/
(result-<suite>.txt, result-<suite>.json), and a row to that folder's README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from resultfile import RESULTS, ROOT, Run  # noqa: E402

# suite -> (the system it is, its archive, debootstrap's script for it, its components)
SUITES = {
    "bookworm": ("Debian 12", "http://deb.debian.org/debian", "bookworm", "main"),
    "trixie": ("Debian 13", "http://deb.debian.org/debian", "trixie", "main"),
    "noble": ("Ubuntu 24.04", "http://archive.ubuntu.com/ubuntu", "gutsy", "main,universe"),
}
UBUNTU_KEYRING = Path("/usr/share/keyrings/ubuntu-archive-keyring.gpg")
# nothing of Python: bootstrap, the README's first command, installs what it needs
BASE_PACKAGES = ("ca-certificates",)
CHECKOUT = "/root/trainstack"
HOSTS = ("127.0.0.1\tlocalhost\n127.0.1.1\t{name}\n\n::1\tlocalhost ip6-localhost ip6-loopback\n"
         "ff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n")
PASSED_VARIABLES = re.compile(r"^(https?_proxy|no_proxy|all_proxy|HTTPS?_PROXY|NO_PROXY|ALL_PROXY)$")
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
OUT = RESULTS / "fresh_debian"
BOOTSTRAP_AND_BUILD_SAID = ("bootstrap:", "cpu-")  # bootstrap's lines; build's per flavour (quickstart's are all cpu-)


def readme_commands(readme: str) -> tuple[str, str]:
    """(the first command, the second) as the README writes them."""
    fences = re.findall(r"^```bash\n(.*?)\n```$", readme, flags=re.M | re.S)
    if len(fences) < 2:
        sys.exit("the README has fewer than two ```bash blocks")
    return fences[0].strip(), fences[1].strip()


def run(argv: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, text=True, capture_output=True, **kwargs)


@contextlib.contextmanager
def mounted(root: Path, find_links: Path | None) -> Iterator[None]:
    """The new root bound onto itself (as on a machine, its / is a mount point, which the suites'
    isolation and buildah need), /proc, /sys (with the host's cgroups, which systemd mounts on a
    machine) and /dev of the host in it (a chroot needs them), unmounted after."""
    points = [("root", root, ["--bind", str(root)]), ("proc", root / "proc", ["-t", "proc", "proc"]), ("sys", root / "sys", ["-t", "sysfs", "sysfs"]),
              ("cgroup", root / "sys" / "fs" / "cgroup", ["--rbind", "/sys/fs/cgroup"]), ("dev", root / "dev", ["--rbind", "/dev"])]
    if find_links is not None:
        points.append(("wheels", root / "mnt" / "wheels", ["--bind", str(find_links)]))
    done = []
    try:
        for _, target, how in points:
            target.mkdir(parents=True, exist_ok=True)
            subprocess.run(["mount", *how, str(target)], check=True)
            done.append(target)
            if target.name == "wheels":
                subprocess.run(["mount", "-o", "remount,bind,ro", str(target)], check=True)
        yield
    finally:
        for target in reversed(done):
            subprocess.run(["umount", "-R", "-l", str(target)], check=False)


def chroot_env(extra: dict[str, str]) -> dict[str, str]:
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
           "LANG": "C.UTF-8", "TERM": "dumb", "DEBIAN_FRONTEND": "noninteractive"}
    env |= {k: v for k, v in os.environ.items() if PASSED_VARIABLES.match(k)}
    # the copied bundle: pip's own certifi and uv's built-in roots do not hold a proxy's CA
    bundle = str(CA_BUNDLE)
    env |= {"SSL_CERT_FILE": bundle, "PIP_CERT": bundle, "REQUESTS_CA_BUNDLE": bundle}
    return env | extra


def in_root(root: Path, command: str, env: dict[str, str], log: Path, timeout: float) -> dict:
    """Run ``command`` with bash inside the root, in the checkout; its seconds, status and last lines."""
    start = time.perf_counter()
    with log.open("w") as sink:
        try:
            code = subprocess.run(["chroot", str(root), "/bin/bash", "-c", f"cd {CHECKOUT} && {command}"],
                                  env=env, stdout=sink, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            code = 124
    seconds = round(time.perf_counter() - start, 1)
    lines = log.read_text(errors="replace").splitlines()
    # the last lines, every test pytest lists as failed or in error (a whole suite's may be many),
    # and what bootstrap and build said of the machine (its Python, the flavours built and left out)
    said = [line for line in lines[:-15] if line.startswith(BOOTSTRAP_AND_BUILD_SAID)]
    failed = [line for line in lines[:-15] if line.startswith(("FAILED ", "ERROR "))][:200]
    tail = said[:20] + failed + lines[-15:]
    print(f"  exit {code} after {seconds} s", flush=True)
    return {"command": command, "seconds": seconds, "exit": code, "passed": code == 0, "tail": tail}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests-k", help="run the second command as 'bash .ci/run -k EXPR' (a subset of the tests)")
    parser.add_argument("--skip-tests", action="store_true", help="run the first command only")
    parser.add_argument("--find-links", type=Path, help="a local wheel folder for the second command (PIP_FIND_LINKS)")
    parser.add_argument("--keep", action="store_true", help="keep the new root (its path is printed)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds each command may run")
    parser.add_argument("--suite", choices=sorted(SUITES), default="bookworm", help="the release to make the root of")
    parser.add_argument("--no-check-gpg", action="store_true", help="debootstrap without checking the archive's signature")
    args = parser.parse_args()
    system, mirror, script, components = SUITES[args.suite]
    if os.geteuid() != 0:
        sys.exit("needs root: debootstrap, chroot and mounts")
    for tool in ("debootstrap", "chroot", "git"):
        if shutil.which(tool) is None:
            sys.exit(f"needs {tool}")
    record = Run(f"result-{args.suite}", folder="fresh_debian")
    first, second = readme_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    work = Path(tempfile.mkdtemp(prefix="fresh-debian-"))
    root = work / "root"
    logs = work / "logs"
    logs.mkdir()
    steps: dict[str, dict] = {}
    try:
        print(f"debootstrap {args.suite} ({system}) into {root}", flush=True)
        start = time.perf_counter()
        trust = ["--no-check-gpg"] if args.no_check_gpg else (
            [f"--keyring={UBUNTU_KEYRING}"] if args.suite == "noble" else [])
        made = run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
                    f"--components={components}", *trust, args.suite, str(root), mirror,
                    f"/usr/share/debootstrap/scripts/{script}"])
        if made.returncode != 0:
            sys.exit(f"debootstrap failed ({made.returncode}):\n{made.stderr[-2000:]}")
        steps["debootstrap"] = {"seconds": round(time.perf_counter() - start, 1), "exit": 0, "passed": True}
        shutil.copyfile(CA_BUNDLE, root / CA_BUNDLE.relative_to("/"))
        shutil.copyfile("/etc/resolv.conf", root / "etc" / "resolv.conf")
        # debootstrap writes no hosts file; Debian's installer writes this one: localhost resolves
        # (selenium reaches chromedriver there, torchrun --standalone meets there) and so does the
        # machine's own name (gloo looks it up)
        (root / "etc" / "hosts").write_text(HOSTS.format(name=socket.gethostname()))
        checkout = root / CHECKOUT.lstrip("/")
        checkout.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD"], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(checkout)], input=archive, check=True)
        env = chroot_env({})
        with mounted(root, args.find_links):
            for name, command, extra in (("first command", first, {}),
                                         ("second command", _subset(second, args.tests_k), _test_env(args))):
                if name == "second command" and args.skip_tests:
                    continue
                print(f"{name}: {command}", flush=True)
                steps[name] = in_root(root, command, env | extra, logs / f"{name.replace(' ', '-')}.log", args.timeout)
                steps[name]["env"] = {k: v for k, v in extra.items()}
                if not steps[name]["passed"]:
                    break
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    write(record, steps, args)
    return 0 if all(step["passed"] for step in steps.values()) else 1


def _subset(command: str, expression: str | None) -> str:
    return f"{command} -k {shlex.quote(expression)}" if expression else command


def _test_env(args: argparse.Namespace) -> dict[str, str]:
    extra = {}
    if args.find_links is not None:
        extra["PIP_FIND_LINKS"] = "/mnt/wheels"
    return extra


def write(record: Run, steps: dict[str, dict], args: argparse.Namespace) -> None:
    lines = [f"{SUITES[args.suite][0]} ({args.suite}) made with debootstrap --variant=minbase --include={','.join(BASE_PACKAGES)}",
             "host CA bundle copied in; proxy and CA variables passed through", ""]
    for name, step in steps.items():
        verdict = "pass" if step["passed"] else f"FAIL (exit {step['exit']})"
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in step.get("env", {}).items())
        lines.append(f"{name}: {step['seconds']} s, {verdict}")
        if "command" in step:
            lines.append(f"  $ {env + ' ' if env else ''}{step['command']}")
            lines += [f"  | {line}" for line in step["tail"]]
    text = "\n".join(lines)
    print(text)
    record.write(text, steps)
    _readme_row(record, steps, SUITES[args.suite][0])


def _readme_row(record: Run, steps: dict[str, dict], system: str) -> None:
    readme = OUT / "README.md"
    head = ("# The README's commands on a fresh Debian 12, Debian 13 or Ubuntu 24.04\n\n"
            "Written by `benchmarks/fresh_debian.py`; the newest run first. `result-<suite>.txt` and\n"
            "`result-<suite>.json` hold the newest run's output on each (`result.txt`: runs before the suite\n"
            "was named, all on Debian 12).\n\n"
            "| date | commit | machine | command | seconds | result |\n|---|---|---|---|---|---|\n")
    rows = readme.read_text(encoding="utf-8").split("|---|---|---|---|---|---|\n", 1)[1] if readme.exists() else ""
    new = ""
    for name, step in steps.items():
        if "command" not in step:
            continue
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in step.get("env", {}).items())
        shown = (env + " " if env else "") + step["command"]
        result = "pass" if step["passed"] else f"fail (exit {step['exit']})"
        cell = shown.replace("|", "\\|")
        new += (f"| {record.meta['date']} | {record.meta['commit']} | {record.meta['machine']} | "
                f"{system}, {name}: `{cell}` | {step['seconds']} | {result} |\n")
    OUT.mkdir(parents=True, exist_ok=True)
    readme.write_text(head + new + rows, encoding="utf-8")
    print(json.dumps({name: step["seconds"] for name, step in steps.items()}))


if __name__ == "__main__":
    sys.exit(main())
