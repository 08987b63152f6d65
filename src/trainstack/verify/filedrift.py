"""verify's file part: every installed file against the hash the build recorded (files.json beside
build.json), else against its distribution's RECORD; what changed, was added or removed, named."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError
from rich.console import Console
from rich.text import Text

from trainstack.attest.files import FileDrift, FilesRecord, against_record_files, compare
from trainstack.errors import VerifyError
from trainstack.verify.target import Target

FILES_RECORD = "files.json"
MAX_RECORD_BYTES = 512 * 1024 * 1024


def check_files(target: Target, build_record: Path | None) -> FileDrift:
    record_path = build_record.parent / FILES_RECORD if build_record is not None else None
    if record_path is not None and record_path.is_file() and target.is_venv:
        return compare(load_files_record(record_path), target.prefix, record_path)
    return against_record_files(target.prefix, [p for p in target.site if p.is_dir()])


def load_files_record(path: Path) -> FilesRecord:
    try:
        if path.stat().st_size > MAX_RECORD_BYTES:
            raise VerifyError(f"{path}: larger than {MAX_RECORD_BYTES // 2**20} MiB: not a files record trainstack wrote")
        return FilesRecord.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top)"
        raise VerifyError(f"{path}: {where}: {first['msg']}", hint="build the flavour again to record its files") from None
    except OSError as exc:
        raise VerifyError(f"{path}: cannot be read ({exc.strerror})") from None


def render_files(drift: FileDrift, console: Console) -> None:
    basis = f"the build's record {drift.record}" if drift.basis == "build record" else "each distribution's RECORD"
    if not drift.reasons:
        console.print(Text.assemble(f"files: {drift.checked} checked against {basis}: ", ("unchanged", "green")), highlight=False)
        return
    console.print(f"files: {drift.checked} checked against {basis}:", highlight=False)
    for line in drift.reasons:
        console.print(Text(f"  {line.removeprefix('files: ')}", style="red"), highlight=False, soft_wrap=True)
