"""Release inputs as a hostile pull request brings them: tests/data/corpus/fragments (changelog
fragments), tests/data/corpus/results (verify.json and bench lines, current and previous), tests/data/corpus/rules
(a stack's rules file), tests/data/corpus/manifests (the previous and the current lock manifest: edits
of the real ones, links and FIFOs in their place) and tests/data/corpus/known-issues (known-issue files).

Each case says what it attacks and what is expected (``# expect: refused`` or ``shown``), in its
first lines or, where the format has no comments (Markdown, JSON), in a ``<file>.attacks`` beside
it. ``*.link`` cases are planted as a symbolic link to the target they hold, ``*.fifo`` cases as a
FIFO. The real ``release`` verb runs over each (in process, and the links through a real
process too): a refused case ends in one line naming the file, exit 2, nothing written and no
fragment moved; a shown case is written with no injected heading, link, table row or HTML, and
no planted credential reaches any output.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
import tomllib

from tests.clirun import assert_no_traceback
from tests.release_pair import PREVIOUS, STACK, copy_pair
from trainstack.cli import main
from trainstack.errors import SpecError
from trainstack.lock.manifest import manifest_path
from trainstack.verify.suites.known_issues import load_known_issues

CORPUS = Path(__file__).resolve().parent / "data" / "corpus"
TOKEN = "SECRET-CORPUS-TOKEN"  # planted in the environment and in files outside the project
MARK = "INJECTED"  # what every payload tries to turn into a line, heading or link of its own
SURFACES = ("fragments", "results", "rules", "manifests")
# the links the notes may hold: those of the accepted cases, no other
ALLOWED_LINKS = {"https://example.org/issues/7", "docs/locking.md", "https://example.org/issues/9"}
HEADINGS = {"Highlights", "Updates", "Versions", "Stability", "Fixes", "Flavours and images", "Driver requirements",
            "Verification", "Performance", "Performance notes", "Known issues", "Quick start", "cpu-minimal 2026.12.0"}
BENCH_ROW = {"model": "tiny", "batch": 2, "seq": 128, "world_size": 1, "mode": "eager", "status": "ok"}
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def cases(surface: str) -> list[Path]:
    return sorted(p for p in (CORPUS / surface).iterdir() if p.suffix != ".attacks")


def header(case: Path) -> str:
    """The '# attacks:' and '# expect:' lines: the case's own first lines, or its sidecar's."""
    if case.suffix in (".toml", ".link", ".fifo"):
        return case.read_text(encoding="utf-8")
    return Path(f"{case}.attacks").read_text(encoding="utf-8")


def expected(case: Path) -> str:
    return re.search(r"^# expect: (refused|shown)$", header(case), re.M).group(1)


def because(case: Path) -> str:
    """What the one-line error of a refused case says: why it was refused."""
    return re.search(r"^# because: (.+)$", header(case), re.M).group(1)


def test_each_case_says_what_it_attacks_and_the_corpus_covers_every_surface() -> None:
    every = [case for surface in (*SURFACES, "known-issues") for case in cases(surface)]
    assert len(every) >= 80
    for case in every:
        text = header(case)
        assert text.startswith("# attacks: ") and expected(case), case.name
        assert expected(case) == "shown" or because(case), case.name
    for surface in SURFACES:
        assert any(expected(c) == "refused" for c in cases(surface))
    assert sum(expected(c) == "shown" for c in every) >= 8


@pytest.fixture(scope="module")
def outside(tmp_path_factory) -> Path:
    """Files of the machine outside the project that a link could reach: a key, a secret."""
    root = tmp_path_factory.mktemp("home")
    (root / ".ssh").mkdir()
    (root / ".ssh" / "id_rsa").write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{TOKEN}\n")
    return root


@pytest.fixture
def project(locked_pair, tmp_path: Path, monkeypatch) -> Path:
    """Two locked releases of the example, one plain fragment, a verify.json that passed."""
    monkeypatch.setenv("TRAINSTACK_CORPUS_SECRET", TOKEN)  # what /proc/self/environ would leak
    copy_pair(locked_pair, tmp_path)
    (tmp_path / "changes").mkdir()
    (tmp_path / "changes" / "10.highlight.md").write_text("NumPy 2.4.\n")
    suite = {"name": "numpy-linalg", "status": "passed", "tests": 12, "failed": [], "known": []}
    verify = {"schema_version": 1, "verdict": "pass", "reasons": [], "gate": {"suites": [suite], "total_failed": 0}}
    (tmp_path / "results" / slug(tmp_path)).mkdir(parents=True)
    (tmp_path / "results" / slug(tmp_path) / "verify.json").write_text(json.dumps(verify))
    return tmp_path


def slug(project: Path) -> str:
    (name,) = json.loads(manifest_path(project / STACK).read_text())["flavours"]
    return name


def plant(case: Path, project: Path, outside: Path) -> Path:
    """Put the case where the release reads it; the path it has there."""
    surface = case.parent.name
    name = case.name.removesuffix(".link").removesuffix(".fifo")
    if surface == "fragments":
        where = project / "changes" / name
    elif surface == "manifests":
        where = manifest_path(project / (STACK if name.startswith("current-") else PREVIOUS))
        if case.suffix == ".toml":
            edit = tomllib.loads(case.read_text(encoding="utf-8"))["edit"]
            original = where.read_text(encoding="utf-8")
            assert edit["find"] in original, case.name
            where.write_text(original.replace(edit["find"], edit["replace"], 1), encoding="utf-8")
            return where
    elif surface == "rules":
        where = project / f"{Path(STACK).stem}.rules.toml"
    elif name.startswith("previous-"):
        where = project / "previous-results" / slug(project) / "bench.jsonl"
        figure = json.loads(case.read_text().splitlines()[0]) if expected(case) == "shown" else {}
        (project / "results" / slug(project) / "bench.jsonl").write_text(
            json.dumps({**BENCH_ROW, **{k: v for k, v in figure.items() if k != "tokens_per_s_per_gpu"},
                        "tokens_per_s_per_gpu": 1000.0}) + "\n")
    else:
        where = project / "results" / slug(project) / ("verify.json" if name.startswith("verify-") else "bench.jsonl")
    where.parent.mkdir(parents=True, exist_ok=True)
    where.unlink(missing_ok=True)
    if case.suffix == ".link":
        target = case.read_text().splitlines()[-1].format(outside=outside)
        if target == "other.txt":
            (where.parent / target).write_text(TOKEN)
        where.symlink_to(target)
    elif case.suffix == ".fifo":
        os.mkfifo(where)
    else:
        where.write_bytes(case.read_bytes())
    return where


def release_args(project: Path) -> list[str]:
    args = ["release", str(project / STACK), "--previous", str(manifest_path(project / PREVIOUS)),
            "--results", str(project / "results"), "--changes", str(project / "changes"), "--out", str(project / "out")]
    if (project / "previous-results").is_dir():
        args += ["--previous-results", str(project / "previous-results")]
    return args


def entries(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def check_refused(project: Path, planted: Path, code: int, out: str, err: str, before: list[str], why: str) -> None:
    assert code == 2, err
    assert why in err, err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert_no_traceback(err)
    assert TOKEN not in out + err, err
    assert str(planted) in err or str(planted.name) in err, err  # names the file (or the link on its way)
    assert not (project / "out").exists()
    assert entries(project / "changes") == before  # no fragment consumed


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.problems: list[str] = []
        self.charts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "iframe", "object", "embed", "form"):
            self.problems.append(f"<{tag}>")
        for name, value in attrs:
            value = value or ""
            if name.startswith("on"):
                self.problems.append(f"{tag} {name}=")
            if name == "href" and not (value.startswith("#") or value in ALLOWED_LINKS or value == "data:,"):
                self.problems.append(f"href={value}")
            if name == "src" and not value.startswith("data:image/png;base64,"):
                self.problems.append(f"src={value}")
        self.charts += tag == "img" and ("class", "chart") in attrs


def check_markdown(markdown: str) -> None:
    """RELEASE.md as CommonMark (and GitHub's tables) reads it: the notes' own headings only,
    the allowed links only, no HTML, every table row as wide as its header."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": True}).enable("table")
    md.validateLink = lambda url: True
    tokens = md.parse(markdown)
    for index, token in enumerate(tokens):
        if token.type == "heading_open":
            title = tokens[index + 1].content
            assert title in HEADINGS or title.startswith("Only in "), title
        for part in [token, *(token.children or [])]:
            assert part.type not in ("html_block", "html_inline"), part.content
            if part.type in ("link_open", "image"):
                target = part.attrs.get("href", part.attrs.get("src"))
                assert target in ALLOWED_LINKS, target
    widths: list[int] = []
    for line in [*markdown.splitlines(), ""]:
        if line.startswith("|"):
            widths.append(len(re.findall(r"(?<!\\)\|", line)))
        elif widths:
            assert len(set(widths)) == 1, widths
            widths = []
    assert not re.search(rf"^[\s#>*+-]*\\?{MARK}", markdown, re.M)  # no payload begins a line of its own


def check_shown(project: Path, code: int, out: str, err: str) -> None:
    assert code == 0, err
    assert_no_traceback(out + err)
    assert TOKEN not in out + err
    texts = {name: (project / "out" / name).read_text(encoding="utf-8") for name in ("RELEASE.md", "release.json", "release.html")}
    for name, text in texts.items():
        assert TOKEN not in text, name
    json.loads(texts["release.json"], parse_constant=lambda c: pytest.fail(f"release.json holds {c}"))
    check_markdown(texts["RELEASE.md"])
    page = _Page()
    page.feed(texts["release.html"])
    assert page.problems == []
    for moved in (project / "changes").rglob("*"):
        assert moved.is_dir() or not moved.is_symlink() and TOKEN not in moved.read_text(errors="replace")


CASES = [case for surface in SURFACES for case in cases(surface)]


@pytest.mark.parametrize("case", CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_release_over_each_case(case: Path, project: Path, outside: Path, capsys) -> None:
    planted = plant(case, project, outside)
    before = entries(project / "changes")
    code = main(release_args(project))
    captured = capsys.readouterr()
    if expected(case) == "refused":
        check_refused(project, planted, code, captured.out, captured.err, before, because(case))
    else:
        check_shown(project, code, captured.out, captured.err)
        notes = json.loads((project / "out" / "release.json").read_text())
        if case.name.startswith(("bench-", "previous-")):
            assert [row["delta_percent"] for row in notes["performance"]] == [None]
            page = _Page()
            page.feed((project / "out" / "release.html").read_text())
            assert page.charts == 1  # the chart was drawn, its names as plain text


LINKS = [case for case in CASES if case.suffix in (".link", ".fifo")]


@pytest.mark.parametrize("case", LINKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_links_and_fifos_through_a_real_process(case: Path, project: Path, outside: Path) -> None:
    planted = plant(case, project, outside)
    before = entries(project / "changes")
    code = "import sys; from trainstack.cli import main; sys.exit(main(sys.argv[1:]))"
    env = {**os.environ, "TRAINSTACK_CORPUS_SECRET": TOKEN}
    done = subprocess.run([sys.executable, "-c", code, *release_args(project)], capture_output=True, text=True,
                          timeout=120, env=env, cwd=project)
    check_refused(project, planted, done.returncode, done.stdout, done.stderr, before, because(case))


@pytest.mark.parametrize("case", cases("known-issues"), ids=lambda p: p.name)
def test_known_issue_files_are_refused_with_the_line_and_field(case: Path, tmp_path: Path, outside: Path) -> None:
    planted = tmp_path / "known-issues.toml"
    if case.suffix == ".link":
        planted.symlink_to(case.read_text().splitlines()[-1].format(outside=outside))
    else:
        planted.write_bytes(case.read_bytes())
    with pytest.raises(SpecError) as info:
        load_known_issues(planted, tmp_path)
    message = str(info.value)
    assert "\n" not in message and TOKEN not in message and because(case) in message
    pattern = rf"{re.escape(str(planted))}: cannot read: " if case.suffix == ".link" else rf"{re.escape(str(planted))}:\d+: known\.0\.\w+: "
    assert re.match(pattern, message), message


def test_a_changes_folder_beside_the_stack_that_is_a_link_is_refused(project: Path, outside: Path, capsys) -> None:
    elsewhere = outside / "changes"
    elsewhere.mkdir(exist_ok=True)
    (elsewhere / "1.fix.md").write_text(f"{TOKEN}\n")
    (project / "changes").rename(project / "kept")
    (project / "changes").symlink_to(elsewhere)
    args = release_args(project)
    del args[args.index("--changes"):args.index("--changes") + 2]  # the default: changes/ beside the stack
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"{project / 'changes'}: is a symbolic link" in err and TOKEN not in err
    assert not (project / "out").exists() and (elsewhere / "1.fix.md").exists()


def test_a_released_folder_that_is_a_link_out_is_refused_before_anything_is_written(project: Path, outside: Path,
                                                                                     capsys) -> None:
    elsewhere = outside / "released"
    elsewhere.mkdir(exist_ok=True)
    (project / "changes" / "released").symlink_to(elsewhere)
    assert main(release_args(project)) == 2
    err = capsys.readouterr().err
    assert f"{project / 'changes' / 'released'}: is not a folder of" in err
    assert not (project / "out").exists() and (project / "changes" / "10.highlight.md").is_file()
    assert list(elsewhere.iterdir()) == []


def test_a_lock_file_that_is_a_link_out_is_refused_by_the_check_release_makes(project: Path, outside: Path,
                                                                              capsys) -> None:
    lock = manifest_path(project / STACK).parent / "locks" / f"{slug(project)}.txt"
    lock.unlink()
    lock.symlink_to(outside / ".ssh" / "id_rsa")
    assert main(release_args(project)) == 2
    err = capsys.readouterr().err
    assert f"{lock}: cannot read: is a symbolic link that leads out of the lock folder" in err and TOKEN not in err
    assert not (project / "out").exists()
