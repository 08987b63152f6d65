"""Link check on small ELF objects built here with the real C compiler and linker."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from trainstack.cli import main
from trainstack.stackfile.schema import Links
from trainstack.verify.linkcheck.check import check_paths
from trainstack.verify.linkcheck.elf import read_elf
from trainstack.verify.linkcheck.resolve import Resolver, expand, parse_ldconfig

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
EXT = "_user.cpython-311-x86_64-linux-gnu.so"


def cc(out: Path, source: str, *flags: str) -> Path:
    src = out.with_suffix(".c")
    src.write_text(source)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", out, src, *flags], check=True, capture_output=True)
    return out


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    """lib/libbase.so.1; pkg/libuser.so (RUNPATH $ORIGIN/../lib, NEEDED libbase.so.1, a dlopen string)."""
    lib, pkg = tmp_path / "env" / "lib", tmp_path / "env" / "pkg"
    lib.mkdir(parents=True)
    pkg.mkdir()
    cc(lib / "libbase.so.1", "int base(void) { return 1; }", "-Wl,-soname,libbase.so.1")
    cc(
        pkg / "libuser.so",
        'int base(void); const char *plugin = "libplugin_x.so.2"; int user(void) { return base(); }',
        f"-L{lib}", "-l:libbase.so.1", "-Wl,-rpath,$ORIGIN/../lib", "-Wl,--enable-new-dtags",
    )
    # a Python extension module linking libuser.so: what makes libuser.so reachable
    cc(pkg / EXT, "int user(void); int init(void) { return user(); }",
       f"-L{pkg}", "-l:libuser.so", "-Wl,-rpath,$ORIGIN", "-Wl,--enable-new-dtags")
    return tmp_path / "env"


def test_reads_needed_runpath_and_rodata_strings(tree: Path) -> None:
    info = read_elf(str(tree / "pkg" / "libuser.so"))
    assert "libbase.so.1" in info.needed
    assert info.runpath == ["$ORIGIN/../lib"] and info.rpath == []
    assert "libplugin_x.so.2" in info.strings


def test_runpath_with_origin_resolves(tree: Path) -> None:
    report = check_paths([tree])
    assert report.ok, report.errors
    assert report.files_checked == 3
    candidate = next(c for c in report.candidates if c.library == "libplugin_x.so.2")
    assert candidate.found_in.endswith("pkg/libuser.so") and candidate.resolved is None


def test_missing_needed_is_an_error_naming_object_and_library(tree: Path) -> None:
    (tree / "lib" / "libbase.so.1").unlink()
    report = check_paths([tree])
    assert not report.ok
    [issue] = report.errors
    assert issue.kind == "unresolved" and issue.library == "libbase.so.1"
    assert issue.file.endswith("pkg/libuser.so") and "RUNPATH $ORIGIN/../lib" in issue.detail


def test_missing_needed_of_a_library_nothing_links_is_a_warning(tree: Path) -> None:
    (tree / "pkg" / EXT).unlink()
    (tree / "lib" / "libbase.so.1").unlink()
    report = check_paths([tree])
    assert report.ok
    assert [(i.severity, i.library) for i in report.issues] == [("warning", "libbase.so.1")]


def test_rpath_into_cuda_stubs_is_flagged(tmp_path: Path) -> None:
    stubs = tmp_path / "cuda" / "lib64" / "stubs"
    stubs.mkdir(parents=True)
    cc(stubs / "libcuda.so", "int cuInit(int f) { return 0; }", "-Wl,-soname,libcuda.so.1")
    (tmp_path / "env").mkdir()
    cc(tmp_path / "env" / "libuses.so", "int cuInit(int); int go(void) { return cuInit(0); }",
       f"-L{stubs}", "-lcuda", f"-Wl,-rpath,{stubs}")
    report = check_paths([tmp_path / "env"])
    kinds = {(i.kind, i.severity) for i in report.issues}
    assert ("stubs-rpath", "error") in kinds
    allowed = check_paths([tmp_path / "env"], Links(allow_stubs_rpath=True))
    assert not any(i.kind == "stubs-rpath" and "RPATH" in i.detail for i in allowed.issues)


def test_required_and_banned_links(tree: Path) -> None:
    links = Links(required=["libuser.so needs libbase.so.1", "libmissing.so.3"], banned=["libbase.so*"])
    report = check_paths([tree], links)
    problems = {(i.kind, i.library) for i in report.errors}
    assert ("required-missing", "libmissing.so.3") in problems
    assert ("banned", "libbase.so*") in problems
    assert not any(i.library == "libbase.so.1" and i.kind == "required-missing" for i in report.errors)


def test_dlopen_data_checks_cudnn_sub_libraries(tmp_path: Path) -> None:
    """Seed 003: libcudnn.so.8 dlopens libcudnn_cnn_train.so.8; ldd never sees it."""
    lib = tmp_path / "env" / "cudnn" / "lib"
    lib.mkdir(parents=True)
    cc(lib / "libcudnn.so.8", "int cudnnGetVersion(void) { return 8900; }", "-Wl,-soname,libcudnn.so.8", "-Wl,-rpath,$ORIGIN")
    for sub in ("ops_infer", "ops_train", "cnn_infer", "adv_infer", "adv_train"):
        cc(lib / f"libcudnn_{sub}.so.8", f"int {sub}(void) {{ return 0; }}", f"-Wl,-soname,libcudnn_{sub}.so.8")
    report = check_paths([tmp_path / "env"])
    [issue] = report.errors
    assert (issue.kind, issue.library) == ("dlopen-missing", "libcudnn_cnn_train.so.8")
    assert issue.file.endswith("libcudnn.so.8")


def test_not_elf_files_are_skipped_and_unreadable_elf_reported(tmp_path: Path) -> None:
    (tmp_path / "notes.so.txt").write_text("not an ELF")
    (tmp_path / "broken.so").write_bytes(b"\x7fELF" + b"\0" * 10)
    report = check_paths([tmp_path])
    assert report.files_checked == 1
    assert report.issues[0].kind == "unreadable"


def test_ldconfig_output_is_parsed_per_class() -> None:
    text = (
        "3 libs found in cache `/etc/ld.so.cache'\n"
        "\tlibz.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libz.so.1\n"
        "\tlibz.so.1 (libc6) => /usr/lib32/libz.so.1\n"
        "\tlibm.so.6 (libc6,x86-64, OS ABI: Linux 3.2.0) => /lib/x86_64-linux-gnu/libm.so.6\n"
    )
    cache = parse_ldconfig(text)
    assert cache[("libz.so.1", 64)] == "/lib/x86_64-linux-gnu/libz.so.1"
    assert cache[("libz.so.1", 32)] == "/usr/lib32/libz.so.1"
    assert ("libm.so.6", 64) in cache


def test_ld_library_path_comes_before_runpath(tree: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    cc(other / "libbase.so.1", "int base(void) { return 2; }", "-Wl,-soname,libbase.so.1")
    resolver = Resolver({}, [str(other)])
    user = read_elf(str(tree / "pkg" / "libuser.so"))
    found = resolver.find("libbase.so.1", str(tree / "pkg"), user.rpath, user.runpath, 64)
    assert found == (str(other / "libbase.so.1"), "LD_LIBRARY_PATH")
    assert expand("${ORIGIN}/../lib", "/x/pkg") == "/x/lib"


def test_cli_exit_codes(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["linkcheck", str(tree)]) == 0
    (tree / "lib" / "libbase.so.1").unlink()
    assert main(["linkcheck", str(tree)]) == 1
    assert main(["linkcheck", str(tree / "nope")]) == 2
    assert "no such file or directory" in capsys.readouterr().err


def test_notes_are_counted_and_listed_with_notes(tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stubs = tmp_path / "stubs"  # a libcuda.so.1 to link against, then gone: this machine has no driver
    stubs.mkdir()
    cc(stubs / "libcuda.so.1", "int cuInit(unsigned f) { return 0; }", "-Wl,-soname,libcuda.so.1")
    cc(tree / "pkg" / "_gpu.cpython-311-x86_64-linux-gnu.so", "int cuInit(unsigned f); int init(void) { return cuInit(0); }",
       f"-L{stubs}", "-l:libcuda.so.1")
    shutil.rmtree(stubs)
    assert main(["linkcheck", str(tree)]) == 0
    quiet = capsys.readouterr().out
    assert "1 note(s) (linkcheck --notes lists them)" in quiet and "libcuda.so.1" not in quiet
    assert main(["linkcheck", str(tree), "--notes"]) == 0
    listed = capsys.readouterr().out
    assert "libcuda.so.1" in listed and "host driver library, not installed on this machine" in listed
    assert "1 note(s)," in listed and "--notes lists them" not in listed


def test_cache_reuses_unchanged_files_and_rereads_changed_ones(tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINSTACK_CACHE_DIR", str(tmp_path / "cache"))
    first = check_paths([tree])
    assert (tmp_path / "cache" / "linkcheck-v2.json").is_file()
    second = check_paths([tree])
    assert second.model_dump(exclude={"seconds"}) == first.model_dump(exclude={"seconds"})
    # rebuild libuser.so without the dlopen string: a new identity, read again
    cc(tree / "pkg" / "libuser.so", "int base(void); int user(void) { return base(); }",
       f"-L{tree / 'lib'}", "-l:libbase.so.1", "-Wl,-rpath,$ORIGIN/../lib", "-Wl,--enable-new-dtags")
    third = check_paths([tree])
    assert not [c for c in third.candidates if c.library == "libplugin_x.so.2"]
    (tmp_path / "cache" / "linkcheck-v1.json").write_text("{ damaged")
    assert check_paths([tree]).ok
