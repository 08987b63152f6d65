"""The second walls behind validation, each on its own: a repository's file read inside its folder
(fsutil.read_regular), Markdown written through one escaping function (release.markdown), charts
that draw any name and figure. Validation refuses these values first; here they reach the walls."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from trainstack.bench.plot import write_chart
from trainstack.fsutil import LeavesFolder, loads_strict, read_regular
from trainstack.release.markdown import code, fence, link, render_markdown, table, text
from trainstack.release.schema import BenchRow, Fragment
from trainstack.release.plots import charts

MARK = "INJECTED"


# --- read_regular inside a folder -------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "repo" / "sub").mkdir(parents=True)
    (tmp_path / "repo" / "sub" / "a.md").write_text("inside\n")
    (tmp_path / "secret").write_text("SECRET-CORPUS-TOKEN\n")
    return tmp_path


def test_a_link_that_stays_inside_is_followed_and_one_that_leaves_is_refused_by_name(tree: Path) -> None:
    repo = tree / "repo"
    (repo / "inside.md").symlink_to("sub/a.md")
    assert read_regular(repo / "inside.md", inside=repo) == b"inside\n"
    (repo / "out.md").symlink_to(tree / "secret")
    with pytest.raises(LeavesFolder, match=r"^\[Errno \d+\] is a symbolic link that leads out of the folder"):
        read_regular(repo / "out.md", "fragment", inside=repo)
    (repo / "climb.md").symlink_to("sub/../../secret")
    with pytest.raises(LeavesFolder):
        read_regular(repo / "climb.md", inside=repo)


def test_a_folder_on_the_way_that_is_a_link_out_is_named(tree: Path) -> None:
    repo = tree / "repo"
    (repo / "results").symlink_to(tree)
    with pytest.raises(LeavesFolder) as info:
        read_regular(repo / "results" / "secret", inside=repo, folder_name="results folder")
    assert f"is in {repo / 'results'}, which is a symbolic link that leads out of the results folder" in str(info.value)


def test_no_link_at_all_where_links_are_not_taken(tree: Path) -> None:
    repo = tree / "repo"
    (repo / "inside.md").symlink_to("sub/a.md")
    with pytest.raises(LeavesFolder, match="is a symbolic link; a fragment is a file in the changes folder"):
        read_regular(repo / "inside.md", "fragment", inside=repo, folder_name="changes folder", links=False)


def test_a_fifo_is_refused_without_blocking_and_a_large_file_by_its_size(tree: Path) -> None:
    repo = tree / "repo"
    os.mkfifo(repo / "pipe.md")
    result: list[BaseException] = []
    reader = threading.Thread(target=lambda: _catch(result, lambda: read_regular(repo / "pipe.md", inside=repo)))
    reader.start()
    reader.join(5)
    assert not reader.is_alive() and "is a FIFO, not a regular file" in str(result[0])
    (repo / "big.md").write_bytes(b"x" * 2048)
    with pytest.raises(OSError, match="is larger than"):
        read_regular(repo / "big.md", inside=repo, limit=1024)


def _catch(into: list[BaseException], call) -> None:
    try:
        call()
    except OSError as exc:
        into.append(exc)


def test_strict_json_refuses_a_key_given_twice_at_any_depth() -> None:
    with pytest.raises(ValueError, match="appears twice"):
        loads_strict('{"gate": {"total_failed": 3, "total_failed": 0}}')
    assert loads_strict('{"a": {"b": 1}, "b": 2}') == {"a": {"b": 1}, "b": 2}


# --- Markdown: one escaping function ---------------------------------------------------------

PAYLOADS = [
    "failed\n\n## INJECTED Security notice [here](https://evil.example/x)",
    "tiny\r| INJECTED | row |",
    "INJECTED <img src=x onerror=alert(1)> <script>x</script>",
    "x](https://evil.example/INJECTED) [y",
    "# INJECTED",
    "1. INJECTED",
    "> INJECTED",
    "INJECTED\u2028## heading",
    "`INJECTED` ``` ~~~",
    "![INJECTED](https://evil.example/i.png)",
    "<https://evil.example/INJECTED>",
    "INJECTED &#91;x&#93;(https://evil.example)",
]


def _blocks(markdown: str) -> list[str]:
    md = MarkdownIt("commonmark", {"html": True}).enable("table")
    md.validateLink = lambda url: True
    kinds = []
    for token in md.parse(markdown):
        kinds.append(token.type)
        kinds += [child.type for child in token.children or []]
    return kinds


@pytest.mark.parametrize("payload", PAYLOADS)
def test_text_of_any_value_is_one_line_of_literal_text(payload: str) -> None:
    for shown in (f"- {text(payload, line_start=True)}", text(payload, line_start=True)):
        assert "\n" not in shown and "\r" not in shown
        kinds = _blocks(shown)
        assert not {"heading_open", "link_open", "image", "html_inline", "html_block", "code_inline", "fence",
                    "blockquote_open", "ordered_list_open", "table_open"} & set(kinds), (shown, kinds)


@pytest.mark.parametrize("payload", PAYLOADS)
def test_a_table_cell_never_makes_a_column_or_a_row(payload: str) -> None:
    lines = table(["model", "mode"], [[payload, "eager"]])
    assert len(lines) == 3
    md = MarkdownIt("commonmark").enable("table")
    cells = [t for t in md.parse("\n".join(lines)) if t.type == "td_open"]
    assert len(cells) == 2


@pytest.mark.parametrize("target", [
    "javascript:window.__pwned=1//", "JAVASCRIPT:alert(1)", " javascript:alert(1)", "data:text/html,x", "vbscript:x",
    "file:///etc/passwd", "//evil.example/x", "https://e.org/)\n\n# INJECTED", "https://e.org/x\" onclick=\"y", "",
])
def test_a_link_to_anything_but_http_or_a_relative_path_is_plain_text(target: str) -> None:
    shown = link("the issue", target, line_start=True)
    assert "link_open" not in _blocks(f"- {shown}") and "heading_open" not in _blocks(f"- {shown}")


def test_http_and_relative_links_stay_links_with_their_parentheses_encoded() -> None:
    for target in ("https://example.org/wiki/A_(b)", "docs/locking.md"):
        md = MarkdownIt("commonmark")
        (inline,) = [t for t in md.parse(link("see", target)) if t.type == "inline"]
        (opened,) = [c for c in inline.children if c.type == "link_open"]
        assert opened.attrs["href"] in (target, "https://example.org/wiki/A_%28b%29")


def test_code_and_fences_cannot_be_closed_by_their_content() -> None:
    assert code("a`b") == "a\\`b"
    assert code("a|b") == "a\\|b" and len(table(["image"], [[code("reg/a|b")]])) == 3
    lines = fence(["docker run ```", "echo ````"])
    assert lines[0] == "`````sh" and lines[-1] == "`````"


def test_notes_made_past_validation_hold_no_injected_heading_or_link(release_notes) -> None:
    hostile = release_notes.model_copy(update={
        "verification": [v.model_copy(update={"verdict": "fail", "reasons": [PAYLOADS[0], PAYLOADS[3]]})
                         for v in release_notes.verification],
        "performance": [BenchRow(slug="s", model=PAYLOADS[1], mode=PAYLOADS[2], tokens_per_s=1.0)],
    })
    markdown = render_markdown(hostile)
    headings = [t for t in MarkdownIt("commonmark").parse(markdown) if t.type == "heading_open"]
    assert len(headings) == len(_headings(render_markdown(release_notes)))
    assert "link_open" not in _blocks(markdown) and "html_inline" not in _blocks(markdown)


def _headings(markdown: str) -> list[str]:
    return [t.type for t in MarkdownIt("commonmark").parse(markdown) if t.type == "heading_open"]


@pytest.fixture
def release_notes():
    from trainstack.release.schema import ComponentVersions, ReleaseNotes, Updates, Verification

    return ReleaseNotes(stack="s", release="2", previous_release="1", image="reg/s", updates=Updates(),
                        versions=ComponentVersions(columns=[], rows={}), flavours=[], drivers=[],
                        verification=[Verification(slug="cpu", measured=True, verdict="pass")], performance=[],
                        fragments=[Fragment(name="1.fix.md", type="fix", text="Fixed.")], quick_start=[])


# --- charts ------------------------------------------------------------------------------------


def test_charts_draw_names_as_plain_text_and_bound_figures() -> None:
    rows = [BenchRow(slug="s", model="$\\frac{$", mode="c$x$", tokens_per_s=1.7e308, previous_tokens_per_s=5e-324),
            BenchRow(slug="s", model="$\\frac{$", mode="eager", tokens_per_s=3.0)]
    assert rows[0].delta_percent is None  # infinite: no change to show, and release.json stays valid JSON
    json.loads(rows[0].model_dump_json())
    (chart,) = charts(rows, "$r", "p$")
    assert chart.data_uri.startswith("data:image/png;base64,") and "$\\frac{$" in chart.title


def test_bench_chart_draws_a_mathtext_name_and_a_huge_figure(tmp_path: Path) -> None:
    row = {"mode": "$\\frac{$", "status": "ok", "tokens_per_s_per_gpu": 1.7e308, "mfu": None}
    write_chart(tmp_path / "chart.png", [row], "trainstack bench: $\\frac{$")
    assert (tmp_path / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
