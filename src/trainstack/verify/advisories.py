"""verify's advisories part: the OSV advisories of the stack's [verify] advisories folder that
affect the flavour's locked packages, and the gate above the stack's max_severity."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel
from rich.console import Console

from trainstack.attest.advisories import Finding, above, findings, load_advisories
from trainstack.errors import SpecError
from trainstack.stackfile.paths import stack_path
from trainstack.stackfile.schema import Verify


class AdvisoryCheck(BaseModel):
    folder: str
    advisories: int  # read from the folder
    max_severity: str | None  # the highest the gate accepts (None: listed, never failed on)
    affecting: list[Finding]

    @property
    def reasons(self) -> list[str]:
        if self.max_severity is None:
            return []
        return [
            f"advisory {f.id} ({f.severity}) affects {f.package} {f.version}: above the stack's max_severity "
            f"{self.max_severity}" + (f"; fixed in {', '.join(f.fixed)}" if f.fixed else "")
            for f in above(self.affecting, self.max_severity)
        ]


def check_advisories(settings: Verify, stack_file: Path, locked: dict[str, str]) -> AdvisoryCheck | None:
    if settings.advisories is None:
        return None
    try:
        folder = stack_path(settings.advisories, stack_file.parent, "verify.advisories")
    except ValueError as exc:
        raise SpecError(f"{stack_file}: verify.advisories: {exc}") from None
    read = load_advisories(folder)
    return AdvisoryCheck(folder=str(folder), advisories=len(read), max_severity=settings.max_severity, affecting=findings(read, locked))


def render_advisories(check: AdvisoryCheck, console: Console) -> None:
    gate = f", the gate fails above {check.max_severity}" if check.max_severity else ""
    console.print(
        f"advisories: {len(check.affecting)} of {check.advisories} in {check.folder} affect the lock{gate}", highlight=False, soft_wrap=True
    )
    for f in check.affecting:
        fixed = f"; fixed in {', '.join(f.fixed)}" if f.fixed else ""
        console.print(f"  {f.id} {f.severity}: {f.package} {f.version}{fixed} {f.summary[:100]}", highlight=False, soft_wrap=True)
