"""Run one declared suite inside the environment, its progress shown live: JUnit XML,
progress events, one rerun of the failures, known issues subtracted. Crashes, timeouts (the
whole process group killed), collection errors and a run of no test are failures, never dropped."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from rich.text import Text

from trainstack import proc
from trainstack.console import err
from trainstack.errors import SpecError
from trainstack.fsutil import atomic_write_json
from trainstack.stackfile.schema import Suite
from trainstack.trust import is_pytest_command
from trainstack.verify.suites.junit import (
    JunitUnreadable,
    Progress,
    Summary,
    XmlCounts,
    error_line,
    read_junit,
    read_progress,
    read_summary,
)
from trainstack.verify.suites.known_issues import KnownIssues
from trainstack.verify.suites.live import SuiteProgress
from trainstack.verify.suites.sandbox import MOUNT_POLICY, TIMED_OUT
from trainstack.verify.suites.schema import ExcludedTest, KnownHit, SuiteResult, SuiteStatus
from trainstack.verify.target import Target, probe_path

PYTEST_EXIT = {2: "interrupted", 3: "internal error", 4: "usage error", 5: "no tests collected"}
# pytest options whose value is the next word (a rerun keeps them with it)
VALUED = (
    "-p",
    "-o",
    "-W",
    "-c",
    "-k",
    "-m",
    "-r",
    "-n",
    "--rootdir",
    "--confcutdir",
    "--deselect",
    "--ignore",
    "--ignore-glob",
    "--basetemp",
    "--durations",
    "--maxfail",
    "--tb",
    "--import-mode",
    "--timeout",
    "--dist",
    "--override-ini",
    "--capture",
    "--log-level",
    "--cov",
    "--cov-report",
)


SANDBOX = Path(__file__).with_name("sandbox.py")
LOGS = "logs"  # beside the suites' own folders, in none of them: a suite cannot replace its log


@dataclass(frozen=True)
class Isolation:
    """How suites run here: in the sandbox (a read-only view of the machine, only their own
    work folder writable) or, where the machine allows none, without it."""

    sandboxed: bool
    text: str  # one line, for verify's output

    @classmethod
    def probe(cls) -> Isolation:
        try:
            result = proc.run([sys.executable, "-I", str(SANDBOX), "--check"], echo=False, timeout=30)
        except (subprocess.TimeoutExpired, OSError) as exc:
            return cls(False, f"none: the sandbox check failed ({exc}); {UNPROTECTED}")
        if result.ok:
            return cls(
                True,
                f"mount namespace and PID namespace: {MOUNT_POLICY}; $HOME and $TMPDIR in the suite's "
                "work folder; the suite sees and signals no process outside, dies with verify whatever "
                "ends it, and is killed at its timeout even while verify is stopped",
            )
        why = (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1].removeprefix("sandbox: ")
        return cls(False, f"none ({why}): {UNPROTECTED}")


# what is off where the machine allows no namespace (not root): said in verify's output and verify.json
UNPROTECTED = (
    "protections off: read-only view (suites could write anywhere this user can, /dev/shm and /proc/sys "
    "included); PID namespace (a suite can signal verify, a daemon it starts can outlive a verify that is "
    "killed, and a stopped verify holds no timeout)"
)
WARDEN_GRACE = 15.0  # verify's own timeout past the sandbox's: the sandbox ends a suite first


NO_ISOLATION = Isolation(False, "none: not asked for")


class SuiteRun:
    def __init__(
        self,
        target: Target,
        suite: Suite,
        workdir: Path,
        cwd: Path,
        where: str,
        isolation: Isolation = NO_ISOLATION,
        writable: tuple[Path, ...] = (),
    ):
        self.target = target
        self.suite = suite
        self.workdir = workdir / suite.name  # this suite's own: its reports, $HOME and $TMPDIR
        self.cwd = cwd
        self.where = where  # "stack.toml:12" for error messages
        self.isolation = isolation
        self.writable = writable  # more folders left writable in the sandbox (a caller's state folder)
        self.log = workdir / LOGS / f"{suite.name}.log"  # verify's own, outside every writable folder
        for folder in (self.workdir / "home", self.workdir / "tmp"):
            folder.mkdir(parents=True, exist_ok=True)

    def argv(self) -> list[str]:
        words = shlex.split(self.suite.command)
        if not words:
            raise SpecError(f"{self.where}: verify.suite '{self.suite.name}': empty command")
        if words[0] in ("python", "python3"):
            words[0] = str(self.target.python)
        elif os.sep not in words[0]:
            found = shutil.which(words[0], path=self.target.env()["PATH"])
            if found is None:
                raise SpecError(
                    f"{self.where}: verify.suite '{self.suite.name}': program '{words[0]}' is not in the "
                    f"environment ({self.target.bin_dir}) nor on PATH"
                )
            words[0] = found
        elif not Path(words[0]).exists():
            raise SpecError(f"{self.where}: verify.suite '{self.suite.name}': program '{words[0]}' does not exist")
        return words

    def is_pytest(self, words: list[str]) -> bool:
        return is_pytest_command(self.suite.command)

    def env(self, progress: Path) -> dict[str, str]:
        env = self.target.env()
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(probe_path("")), os.environ.get("PYTHONPATH", "")) if p)
        env["TRAINSTACK_PROGRESS"] = str(progress)
        env["HOME"] = str(self.workdir / "home")
        env["TMPDIR"] = str(self.workdir / "tmp")
        env.pop("TRAINSTACK_EXCLUDE", None)
        if self.suite.exclude:
            patterns = self.workdir / f"{self.suite.name}.exclude.json"
            atomic_write_json(patterns, [item.test for item in self.suite.exclude])
            env["TRAINSTACK_EXCLUDE"] = str(patterns)
        if self.isolation.sandboxed:
            env["PYTHONDONTWRITEBYTECODE"] = "1"  # the sources are read-only there
        return env

    def contained(self, argv: list[str]) -> list[str]:
        if not self.isolation.sandboxed:
            return argv
        writable = [str(self.workdir)] + [str(p) for p in self.writable]
        return [
            sys.executable,
            "-I",
            str(SANDBOX),
            "--timeout",
            str(self.suite.timeout),
            *(w for folder in writable for w in ("--writable", folder)),
            "--",
            *argv,
        ]

    def execute(self, words: list[str], tag: str) -> tuple[proc.Result | None, Path, Path, float]:
        xml = self.workdir / f"{self.suite.name}.{tag}.xml"
        progress = self.workdir / f"{self.suite.name}.{tag}.events"
        for stale in (xml, progress):
            stale.unlink(missing_ok=True)
        pytest = self.is_pytest(words)
        argv = words + (["-p", "trainstack_progress", f"--junitxml={xml}"] if pytest else [])
        label = self.suite.name + (" (rerun of the failures)" if tag == "rerun" else "")
        start = time.perf_counter()
        try:
            with SuiteProgress(label, progress if pytest else None):
                timeout = self.suite.timeout + (WARDEN_GRACE if self.isolation.sandboxed else 0)
                result = proc.run(
                    self.contained(argv), cwd=self.cwd, env=self.env(progress), timeout=timeout, log=self.log, new_session=True
                )
        except subprocess.TimeoutExpired:
            result = None
        if (
            result is not None
            and self.isolation.sandboxed
            and result.returncode == TIMED_OUT
            and (result.stderr.strip().splitlines() or [""])[-1].startswith("sandbox: timed out")
        ):
            result = None  # the sandbox's warden ended it at its timeout
        return result, xml, progress, time.perf_counter() - start


class Exclusions(TypedDict):
    excluded: list[ExcludedTest]
    unmatched_exclusions: list[ExcludedTest]


class _Shared(Exclusions):
    """The fields of a SuiteResult that one run gives whatever its status."""

    name: str
    command: str
    seconds: float
    max_failed: int


def run_suite(
    target: Target,
    suite: Suite,
    *,
    workdir: Path,
    cwd: Path,
    where: str,
    known: KnownIssues,
    target_name: str,
    isolation: Isolation = NO_ISOLATION,
    writable: tuple[Path, ...] = (),
) -> SuiteResult:
    run = SuiteRun(target, suite, workdir, cwd, where, isolation, writable)
    words = run.argv()
    err.print(Text(f"suite {suite.name}", style="bold"), highlight=False)
    result, xml, events, seconds = run.execute(words, "run")
    progress = read_progress(events)
    base: _Shared = {
        "name": suite.name,
        "command": suite.command,
        "seconds": round(seconds, 2),
        "max_failed": suite.max_failed,
        **exclusions(suite, progress),
    }
    if result is None:
        failed = progress.collect_errors + progress.failed
        failed += [progress.running] if progress.running and progress.running not in failed else []
        return SuiteResult(
            status="timeout",
            exit_code=None,
            reason=f"timed out after {suite.timeout:.0f} s"
            + (f" in {progress.running}" if progress.running else "")
            + "; its process group was killed",
            crashed_in=progress.running,
            failed=failed,
            collection_errors=progress.collect_errors,
            counts=progress.counts,
            ran=progress.ran,
            failure_reasons=failure_reasons(failed, progress),
            **base,
        )
    if result.returncode == 125 and run.isolation.sandboxed and result.stderr.startswith("sandbox:"):
        return SuiteResult(status="error", exit_code=125, reason=result.stderr.strip().splitlines()[0][:300], **base)
    if not run.is_pytest(words):
        # no test count to read: it passes on its exit status only where the stack allows a run of no counted test
        status: SuiteStatus = "passed" if result.ok and suite.allow_no_tests else "failed"
        reason = f"exit {result.returncode} (not a pytest command: no test counted, judged by its exit status)"
        if result.ok and not suite.allow_no_tests:
            reason += "; a suite that runs no counted test passes only with allow_no_tests = true"
        return SuiteResult(status=status, exit_code=result.returncode, reason=reason, **base)
    if not xml.is_file():
        return _crashed(result, progress, base)
    return _judged(run, words, result, xml, progress, known, target_name, base)


def exclusions(suite: Suite, progress: Progress) -> Exclusions:
    """The tests the suite's exclude list left out, each with its entry's reason, and the
    entries that matched no collected test (known only where the plugin read the list)."""
    excluded = [
        ExcludedTest(test=test, reason=suite.exclude[index].reason)
        for test, index in progress.excluded.items()
        if 0 <= index < len(suite.exclude)
    ]
    used = set(progress.excluded.values())
    unmatched = (
        [ExcludedTest(test=item.test, reason=item.reason) for number, item in enumerate(suite.exclude) if number not in used]
        if progress.exclusions_applied
        else []
    )
    return {"excluded": excluded, "unmatched_exclusions": unmatched}


def _judged(
    run: SuiteRun, words: list[str], result: proc.Result, xml: Path, progress: Progress, known: KnownIssues, target_name: str, base: _Shared
) -> SuiteResult:
    """A pytest run that finished: its failing tests rerun once, known ones subtracted, its
    collection errors counted (accepted only by an exact known-issues entry), its counts
    compared with pytest's own summary line."""
    suite = run.suite
    try:
        xml_counts = read_junit(xml)
    except JunitUnreadable as exc:
        return _crashed(result, progress, base, f"its JUnit XML was not read: {exc}")
    summary = read_summary(result.stdout)
    collect_ids = set(progress.collect_errors)
    failing = progress.failed if progress.recorded else [t for t in xml_counts.failed_ids if t not in collect_ids]
    interrupted = result.returncode in (2, 3, 4)
    still, flaky = _rerun(run, words, failing, progress) if suite.rerun_failed and failing and not interrupted else (failing, [])
    hits, remaining = _subtract_known(still, progress, known, suite.name, target_name)
    collect_hits, collect_left = _subtract_known(progress.collect_errors, progress, known, suite.name, target_name, exact=True)
    failed = collect_left + remaining
    cross = _cross_check(progress, summary)
    ran = progress.ran
    status: SuiteStatus = "passed" if len(failed) <= suite.max_failed else "failed"
    reason = (
        f"{len(failed)} failing (max {suite.max_failed}), {len(progress.collect_errors)} collection error(s), "
        f"{len(flaky)} flaky, {len(hits) + len(collect_hits)} known, {len(progress.excluded)} excluded; "
        f"{ran} test(s) ran"
    )
    if interrupted:
        why = error_line(result.stderr) or error_line(result.stdout)
        status, reason = (
            "error",
            (f"pytest exit {result.returncode}: {PYTEST_EXIT[result.returncode]}" + (f" ({why})" if why else "") + f"; {reason}"),
        )
    elif ran == 0 and not suite.allow_no_tests:
        status, reason = "failed", f"no test ran ({reason}); a suite that may run none says allow_no_tests = true"
    if xml_counts.tests < ran:
        # a report rewritten after pytest wrote it (or cut short): it hides tests that ran
        status, reason = "failed", f"{reason}; the JUnit XML lists {xml_counts.tests} test case(s) of the {ran} that ran"
    if cross.startswith("DISAGREE"):
        # one of the two counts lies (a plugin rewriting reports, a truncated run): never pass on it
        status, reason = "failed", f"{reason}; {cross}"
    return SuiteResult(
        status=status,
        exit_code=result.returncode,
        reason=reason,
        tests=xml_counts.tests,
        xml_failed=xml_counts.failed,
        summary_failed=summary.failed if summary else None,
        summary_line=summary.line if summary else "",
        cross_check=cross,
        counts=progress.counts,
        ran=ran,
        collection_errors=progress.collect_errors,
        failed=failed,
        flaky=flaky,
        known=hits + collect_hits,
        failure_reasons=failure_reasons([*failed, *flaky, *(h.test for h in hits + collect_hits)], progress, xml_counts),
        **base,
    )


def _crashed(result: proc.Result, progress: Progress, base: _Shared, why: str = "no JUnit XML written") -> SuiteResult:
    """No XML (the runner died before writing it), or XML that could not be read. Count what
    the events saw, plus the crash."""
    how = f"killed by signal {-result.returncode}" if result.returncode < 0 else f"exit {result.returncode}"
    where = f" while running {progress.running}" if progress.running else ""
    failed = progress.collect_errors + progress.failed
    failed += [progress.running] if progress.running and progress.running not in failed else []
    last = (result.stderr.strip().splitlines() or [""])[-1][:200]
    reason = f"crashed ({how}){where}; {why}" + (f": {last}" if last and not where and why == "no JUnit XML written" else "")
    return SuiteResult(
        status="crashed",
        exit_code=result.returncode,
        reason=reason,
        crashed_in=progress.running,
        failed=failed,
        collection_errors=progress.collect_errors,
        counts=progress.counts,
        ran=progress.ran,
        failure_reasons=failure_reasons(failed, progress),
        **base,
    )


def failure_reasons(tests: list[str], progress: Progress, xml: XmlCounts | None = None) -> dict[str, str]:
    """Why each of ``tests`` failed, one line each: the plugin's events, else (a run whose ids
    came from the JUnit XML) the XML's message; tests with neither are left out."""
    messages = {**(xml.messages if xml is not None else {}), **progress.messages}
    return {test: messages[test] for test in tests if messages.get(test)}


def _rerun(run: SuiteRun, words: list[str], failing: list[str], progress: Progress) -> tuple[list[str], list[str]]:
    """Run the failing tests once more; those that pass now are flaky."""
    ids = [progress.rerun_ids.get(t, t) for t in failing]
    result, xml, events, _ = run.execute(rerun_argv(words, ids), "rerun")
    again = read_progress(events)
    if result is None or not xml.is_file():
        return failing, []  # the rerun itself broke: keep every failure
    failed_again = {again.rerun_ids.get(t, t) for t in again.failed}
    collected = set(again.rerun_ids.values())
    still = []
    for test in failing:
        wanted = progress.rerun_ids.get(test, test)
        # a test the rerun did not collect at all stays failed
        if wanted in failed_again or wanted not in collected:
            still.append(test)
    return still, [t for t in failing if t not in still]


def rerun_argv(words: list[str], ids: list[str]) -> list[str]:
    """The suite's own command (its interpreter, -m pytest, --pyargs and every other option)
    with its test arguments replaced by the failing tests' ids, parameters and all."""
    at = next(i for i, w in enumerate(words) if "pytest" in Path(w).name) + 1
    kept: list[str] = []
    rest = words[at:]
    i = 0
    while i < len(rest):
        word = rest[i]
        if word.startswith(("--junitxml", "--junit-xml")):
            i += 1 if "=" in word else 2
            continue
        if word.startswith("-"):
            kept.append(word)
            if word in VALUED and i + 1 < len(rest):
                kept.append(rest[i + 1])
                i += 1
        i += 1
    return words[:at] + kept + ids


def _subtract_known(
    still: list[str], progress: Progress, known: KnownIssues, suite: str, target: str, *, exact: bool = False
) -> tuple[list[KnownHit], list[str]]:
    hits: list[KnownHit] = []
    remaining: list[str] = []
    accepted = known.accept(suite, target, [[test, progress.rerun_ids.get(test, test)] for test in still], exact=exact)
    for test, issue in zip(still, accepted):
        if issue is None:
            remaining.append(test)
        else:
            hits.append(KnownHit(test=test, reason=issue.reason, link=issue.link))
    return hits, remaining


def _cross_check(progress: Progress, summary: Summary | None) -> str:
    """The counts of the reports pytest made (collection errors and skips included) against
    pytest's own summary line, word for word."""
    ours = {k: v for k, v in progress.counts.items() if v}
    if summary is None:
        return f"no summary line to cross-check (counted: {_counts_text(ours)})"
    theirs = summary.normalised()
    if ours != theirs:
        return f"DISAGREE: counted {_counts_text(ours)}, summary line says {_counts_text(theirs)}"
    return "agree"


def _counts_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "nothing"
