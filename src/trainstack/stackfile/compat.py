"""A stack's flavours checked against the compatibility rules in effect (the shipped data with the stack's own over it)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from trainstack import grammar
from trainstack.errors import RuleViolation
from trainstack.rules import data, nvcc, toolchain
from trainstack.rules.nvcc import HostNvcc
from trainstack.rules.schema import fill
from trainstack.stackfile.matrix import Flavour, base_of, components_for, expand_flavours
from trainstack.stackfile.schema import Component, Stack
from trainstack.trust import runs_code

Level = Literal["error", "warning", "info"]


@dataclass(frozen=True)
class Finding:
    flavour: str  # slug
    rule: str  # "torch.variant", "cuda.driver", "deepspeed.async_io", ...
    level: Level
    message: str
    source: str


BACKENDS = ("venv", "oci")  # build's backends; venv is build's default


def check_stack(stack: Stack, host: HostNvcc | None = None, backend: str | None = None) -> list[Finding]:
    """Every flavour's findings. ``host``: the host's nvcc as found (trainstack.hostnvcc), which
    venv builds of a flavour with no nvcc wheel compile with; None when not looked at (lock).
    ``backend``: the backend the stack will be built with (check's --backend); a flavour that
    backend cannot compile while the other can is an error (toolchain.backend). None: not judged."""
    return [finding for flavour in expand_flavours(stack) for finding in check_flavour(stack, flavour, host, backend)]


def needs_host_nvcc(stack: Stack) -> bool:
    """Whether some flavour compiles extensions with no nvcc wheel of its CUDA: only then does
    check look at the host's nvcc (its venv route)."""
    if not stack.toolchain.nvcc:
        return False
    for flavour in expand_flavours(stack):
        if flavour.cuda == "cpu" or flavour.cuda not in stack.rules_in_effect.cuda.versions:
            continue
        if nvcc.wheel_route(stack.rules_in_effect, flavour.cuda) is None and any(
            compiles(stack, c) for c in components_for(stack, flavour)
        ):
            return True
    return False


def compiles(stack: Stack, component: Component) -> bool:
    """Whether building the component compiles code: a source build, except DeepSpeed asked for
    no op ahead of time (DS_BUILD_OPS not 1 and no DS_BUILD_<OP>=1: it JIT-compiles on use)."""
    if not component.is_source_build:
        return False
    deepspeed = stack.rules_in_effect.extensions.deepspeed
    if component.name != deepspeed.package:
        return True
    prefix = deepspeed.all_env.removesuffix("OPS")
    return any(value == "1" for name, value in component.build_env.items() if name.startswith(prefix))


def oci_refusal(stack: Stack, flavour: Flavour) -> str | None:
    """Why an OCI build of the flavour cannot compile its extensions (no nvcc of its CUDA from the
    wheels, the base's Debian archive or the base image itself); None when it can or needs none."""
    rules = stack.rules_in_effect
    if flavour.cuda == "cpu" or flavour.cuda not in rules.cuda.versions or not stack.toolchain.nvcc:
        return None
    if not any(compiles(stack, c) for c in components_for(stack, flavour)):
        return None
    found = base_of(stack, flavour)
    base = found[1] if found is not None else None
    if nvcc.oci_route(rules, flavour.cuda, flavour.os, base, stack.build.base_cuda.get(flavour.os)) is not None:
        return None
    return nvcc.no_oci_route(rules, flavour.cuda, flavour.os, base)


def errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.level == "error"]


def check_flavour(stack: Stack, flavour: Flavour, host: HostNvcc | None = None, backend: str | None = None) -> list[Finding]:
    components = {c.key: c for c in components_for(stack, flavour)}
    checks = (_os, _cuda, _torch, _compile_needs, _flash_attn, _arch_lists, _deepspeed, _toolchain, _allowed_env)
    found: list[Finding] = []
    for check in checks:
        found.extend(check(stack, flavour, components))
    found.extend(_nvcc_route(stack, flavour, components, host, backend))
    return found


def torch_version(stack: Stack, flavour: Flavour) -> str | None:
    """The torch release a flavour will get, as far as the spec says: '2.11.0', or the
    newest known minor ('2.12') a range admits. None: no torch, nightly, or unknown."""
    torch = next((c for c in components_for(stack, flavour) if c.key == "torch"), None)
    if torch is None or flavour.channel == "nightly":
        return None
    if torch.pinned_version:
        return torch.pinned_version
    spec = SpecifierSet(torch.version or "")
    for minor in sorted(stack.rules_in_effect.torch.releases, key=Version, reverse=True):
        if any(Version(f"{minor}.{patch}") in spec for patch in range(10)):
            return minor
    return None


def require_rules(stack: Stack, flavours: list[Flavour], where: str, host: HostNvcc | None = None) -> None:
    """RuleViolation naming the first broken rule among ``flavours``; ``host``: the host's nvcc
    as check looks at it (needs_host_nvcc), so that a flavour check refuses is refused here too."""
    for flavour in flavours:
        for finding in errors(check_flavour(stack, flavour, host)):
            raise RuleViolation(f"{where}: flavour {finding.flavour}: {finding.message}", hint=finding.source)


def _finding(flavour: Flavour, rule: str, level: Level, message: str, source: str) -> Finding:
    return Finding(flavour.slug, rule, level, message, source)


def _os(stack: Stack, flavour: Flavour, components: dict[str, Component]) -> list[Finding]:
    platforms = stack.rules_in_effect.platforms
    if flavour.os not in platforms.os:
        known = ", ".join(platforms.os)
        text = f"OS '{flavour.os}' is not known (one of: {known})"
        return [_finding(flavour, "os.platform", "error", text, platforms.glibc.source)]
    os_rule = platforms.os[flavour.os]
    platform = data.python_platform(stack.rules_in_effect, flavour.os, flavour.arch)
    text = fill(platforms.glibc.message, os=flavour.os, glibc=os_rule.glibc, platform=platform)
    found = [_finding(flavour, "os.platform", "info", text, os_rule.source)]
    if flavour.arch != "x86_64" and platforms.arch is not None:
        text = fill(platforms.arch.message, arch=flavour.arch, platform=platform)
        found.append(_finding(flavour, "os.arch", "info", text, platforms.arch.source))
    return found


def _cuda(stack: Stack, flavour: Flavour, components: dict[str, Component]) -> list[Finding]:
    if flavour.cuda == "cpu":
        return []
    rules = stack.rules_in_effect.cuda
    if flavour.cuda not in rules.versions:
        known = ", ".join(rules.versions)
        text = f"CUDA {flavour.cuda} is not known (one of: {known})"
        return [_finding(flavour, "cuda.driver", "error", text, rules.driver.source)]
    text = fill(rules.driver.message, cuda=flavour.cuda, driver=rules.versions[flavour.cuda].driver)
    return [_finding(flavour, "cuda.driver", "info", text, rules.driver.source)]


def _torch(stack: Stack, flavour: Flavour, components: dict[str, Component]) -> list[Finding]:
    if "torch" not in components:
        return []
    rules = stack.rules_in_effect.torch
    if flavour.channel == "nightly":
        return [_finding(flavour, "torch.nightly", "info", rules.nightly.message, rules.nightly.source)]
    version = torch_version(stack, flavour)
    if version is None:
        known = ", ".join(rules.releases)
        text = f"torch '{components['torch'].version}' admits no torch release in the rules data (known: {known})"
        return [_finding(flavour, "torch.release", "error", text, rules.index.source)]
    minor = data.torch_minor(version)
    if minor not in rules.releases:
        text = f"torch {minor} is not in the rules data (known: {', '.join(rules.releases)})"
        return [_finding(flavour, "torch.release", "error", text, rules.index.source)]
    release = rules.releases[minor]
    found = []
    missing = data.arch_cuda_missing(stack.rules_in_effect, version, flavour.cuda_tag, flavour.arch)
    if flavour.cuda_tag in release.variants and missing:
        found.append(_finding(flavour, "torch.arch", "error", missing, rules.arch[flavour.arch].source))
    elif flavour.cuda_tag not in release.variants:
        allowed = fill(rules.variants.message, minor=minor, variants=", ".join(release.variants))
        text = f"torch {minor} publishes no {flavour.cuda_tag} wheels ({allowed})"
        found.append(_finding(flavour, "torch.variant", "error", text, release.source))
    elif data.vendor_local(version) is not None:
        found.append(_vendor_build(stack, flavour, version))
    else:
        index = data.index_for(stack.rules_in_effect, version, flavour.cuda_tag, flavour.channel, flavour.arch)
        text = f"torch {minor} {flavour.cuda_tag} wheels come from {index or 'PyPI (its default variant)'}"
        found.append(_finding(flavour, "torch.variant", "info", text, rules.index.source))
    if flavour.python not in release.pythons:
        allowed = fill(rules.pythons.message, minor=minor, pythons=", ".join(release.pythons))
        text = f"torch {minor} has no wheels for Python {flavour.python} ({allowed})"
        found.append(_finding(flavour, "torch.python", "error", text, release.source))
    return found


def _vendor_build(stack: Stack, flavour: Flavour, version: str) -> Finding:
    """torch pinned to a vendor's local version: only the stack's own indexes can serve it."""
    source = stack.rules_in_effect.torch.index.source
    own = [*([stack.index.url] if stack.index.url else []), *stack.index.extra, *stack.index.find_links]
    if not own:
        text = (
            f"torch {version} is a vendor's build, which PyTorch's indexes do not serve; name the index "
            "that does in [index] url, extra or find_links"
        )
        return _finding(flavour, "torch.vendor", "error", text, source)
    text = (
        f"torch {version} is a vendor's build: it comes from the stack's own index "
        f"({grammar.redacted_url(own[0])}), not PyTorch's {flavour.cuda_tag} index"
    )
    return _finding(flavour, "torch.vendor", "info", text, source)


def _compile_needs(stack: Stack, flavour: Flavour, components: dict[str, Component]) -> list[Finding]:
    """verify's compile smoke check on a Python where torch's wheels leave out what inductor imports."""
    rule = stack.rules_in_effect.extensions.compile
    if rule is None or "torch" not in components or "compile" not in stack.verify.smoke:
        return []
    if Version(flavour.python) not in SpecifierSet(rule.python) or rule.package in components:
        return []
    text = fill(rule.message, python=flavour.python)
    return [_finding(flavour, "torch.compile", "warning", text, rule.source)]


def _flash_attn(stack: Stack, flavour: Flavour, components: dict[str, Component]) -> list[Finding]:
    rule = stack.rules_in_effect.extensions.flash_attn
    component = components.get(rule.package)
    if component is None:
        return []
    if flavour.cuda == "cpu":
        text = f"{rule.package} needs CUDA: restrict it with when.cuda"
        return [_finding(flavour, "flash_attn.arch", "error", text, rule.source)]
    found = []
    for where, archs in _flash_attn_archs(stack, component, rule.arch_env):
        low = sorted({a for a in archs if int(_base(a)) < int(rule.min_arch)}, key=lambda a: int(_base(a)))
        if low:
            text = f"{rule.message}; {where} asks for sm_{', sm_'.join(low)}"
            found.append(_finding(flavour, "flash_attn.arch", "error", text, rule.source))
    return found


def _flash_attn_archs(stack: Stack, component: Component, names: list[str]) -> list[tuple[str, list[str]]]:
    """The GPU targets flash-attn's build gets, and where the stack wrote them: its own
    build_env, else (built from source) [toolchain] archs, which the build passes to every
    compile as TORCH_CUDA_ARCH_LIST and FLASH_ATTN_CUDA_ARCHS: one rule wherever they are written."""
    own = [arch for env in names for arch in parse_archs(component.build_env.get(env, ""))]
    found = [(f"{component.name}.build_env", own)] if own else []
    if component.is_source_build and stack.toolchain.archs and not all(env in component.build_env for env in names):
        found.append((f"[toolchain] archs (passed to {component.name}'s build as {' and '.join(names)})", list(stack.toolchain.archs)))
    return found


def _arch_lists(stack: Stack, flavour: Flavour, components: dict[str, Component]) -> list[Finding]:
    """Architectures named in build_env must be ones the flavour's nvcc can target."""
    rules = stack.rules_in_effect.cuda
    if flavour.cuda == "cpu" or flavour.cuda not in rules.versions:
        return []
    env_names = {"TORCH_CUDA_ARCH_LIST", *stack.rules_in_effect.extensions.flash_attn.arch_env}
    allowed = set(rules.versions[flavour.cuda].archs)
    found = []
    for component in components.values():
        for env in sorted(env_names & component.build_env.keys()):
            bad = [a for a in parse_archs(component.build_env[env]) if _base(a) not in allowed]
            if bad:
                text = (
                    f"{component.name}.build_env.{env}: CUDA {flavour.cuda} cannot target sm_{', sm_'.join(bad)} "
                    f"(it targets sm_{', sm_'.join(rules.versions[flavour.cuda].archs)})"
                )
                found.append(_finding(flavour, "cuda.archs", "error", text, rules.archs.source))
    return found


def _deepspeed(stack: Stack, flavour: Flavour, components: dict[str, Component]) -> list[Finding]:
    rule = stack.rules_in_effect.extensions.deepspeed
    component = components.get(rule.package)
    if component is None:
        return []
    env = component.build_env
    torch = torch_version(stack, flavour)
    found = []
    for name, op in rule.ops.items():
        wanted = env.get(op.env) == "1" or (env.get(rule.all_env) == "1" and env.get(op.env) != "0")
        if not wanted:
            continue
        if op.system_packages and not set(op.system_packages) & set(stack.build.system_packages):
            found.append(_finding(flavour, f"deepspeed.{name}", "error", op.message, op.source))
        if op.torch and torch is not None and Version(torch) not in SpecifierSet(op.torch):
            found.append(_finding(flavour, f"deepspeed.{name}", "error", f"{op.message} (torch is {torch})", op.source))
    return found


def _toolchain(stack: Stack, flavour: Flavour, components: dict[str, Component]) -> list[Finding]:
    """One CUDA release (the flavour's) for every toolchain component; targets its nvcc can build."""
    cuda_rules = stack.rules_in_effect.cuda
    if flavour.cuda == "cpu" or flavour.cuda not in cuda_rules.versions:
        return []
    rules = toolchain.toolchain_rules()
    found = []
    lines = list(stack.toolchain.packages) + [c.requirement() for c in components.values() if c.git is None and c.path is None]
    mixed = toolchain.requirement_mismatches(flavour.cuda, lines)
    if mixed:
        text = toolchain.release_message(flavour.cuda, mixed)
        found.append(_finding(flavour, "toolchain.release", "error", text, rules.release.source))
    targets = cuda_rules.versions[flavour.cuda].archs
    bad = toolchain.bad_archs(stack.toolchain.archs, targets)
    if bad:
        text = fill(rules.archs.message, cuda=flavour.cuda, bad=", sm_".join(bad), archs=", sm_".join(targets))
        found.append(_finding(flavour, "toolchain.archs", "error", text, rules.archs.source))
    return found


def _nvcc_route(
    stack: Stack, flavour: Flavour, components: dict[str, Component], host: HostNvcc | None, backend: str | None = None
) -> list[Finding]:
    """Where the nvcc of a flavour that builds extensions comes from, per backend (toolchain.route);
    none for either backend is an error once the host was looked at (toolchain.nvcc)."""
    rules = stack.rules_in_effect
    cuda_rules = rules.cuda
    if flavour.cuda == "cpu" or flavour.cuda not in cuda_rules.versions:
        return []
    if not any(compiles(stack, c) for c in components.values()):
        return []
    if not stack.toolchain.nvcc:
        text = "[toolchain] nvcc = false: the base image's nvcc (oci builds) or the host's (venv builds) compiles, unchecked"
        return [_finding(flavour, "toolchain.route", "info", text, cuda_rules.nvcc.source)]
    based = base_of(stack, flavour)
    base = based[1] if based is not None else None
    declared = stack.build.base_cuda.get(flavour.os)
    oci = nvcc.oci_route(rules, flavour.cuda, flavour.os, base, declared)
    if oci is not None and oci.debian is not None:
        source = oci.debian.source
    elif oci is not None and oci.kind == "devel" and cuda_rules.devel_image is not None:
        source = cuda_rules.devel_image.source
    else:
        source = cuda_rules.debian.source if cuda_rules.debian is not None else cuda_rules.nvcc.source
    text = nvcc.routes_text(rules, flavour.cuda, flavour.os, host, base, declared)
    found = [_finding(flavour, "toolchain.route", "info", text, source)]
    venv = nvcc.venv_route(rules, flavour.cuda, host)
    if host is not None and backend is not None and (oci is None) != (venv is None):
        able, unable = ("oci", "venv") if venv is None else ("venv", "oci")
        if backend == unable:
            found.append(_finding(flavour, "toolchain.backend", "error", _backend_text(flavour, components, unable, able), source))
    if oci is not None or venv is not None:
        return found
    if host is None:  # lock: the host is not looked at, the wheels' refusal says what to do
        refusal = data.nvcc_refusal(rules, flavour.cuda) or nvcc.debian_offers(rules)
        return found + [_finding(flavour, "toolchain.nvcc", "info", refusal, cuda_rules.nvcc.source)]
    text = nvcc.no_route(rules, flavour.cuda, flavour.os, host, base)
    return found + [_finding(flavour, "toolchain.nvcc", "error", text, source)]


def _backend_text(flavour: Flavour, components: dict[str, Component], unable: str, able: str) -> str:
    """One line: which backend builds the flavour and which cannot, and the ways out."""
    sources = ", ".join(sorted(c.key for c in components.values() if c.is_source_build))
    default = " (build's default)" if unable == BACKENDS[0] else ""
    fixes = [f"build with --backend {able} (check --backend {able} checks that)", f"or build with --skip-sources (leaves out {sources})"]
    if unable == "venv":
        fixes.append(f"or set CUDA_HOME to a CUDA {flavour.cuda} toolkit")
    return (
        f"builds: {able} can, {unable}{default} cannot: no nvcc of CUDA {flavour.cuda} for {sources} "
        f"there (see toolchain.route); {', '.join(fixes)}"
    )


_ARCH_TOKEN = re.compile(r"^(?:sm_|compute_)?(\d+)\.?(\d*)([af]?)(?:\+PTX)?$", re.IGNORECASE)


def parse_archs(value: str) -> list[str]:
    """'8.0;9.0+PTX' or '80,90a' or 'sm_80 sm_90' -> ['80', '90'] / ['80', '90a']."""
    archs = []
    for token in re.split(r"[;,\s]+", value.strip()):
        match = _ARCH_TOKEN.match(token)
        if match:
            archs.append(match.group(1) + match.group(2) + match.group(3).lower())
    return archs


def _base(arch: str) -> str:
    return arch.rstrip("af")


LOADER_SOURCE = "https://man7.org/linux/man-pages/man8/ld.so.8.html#ENVIRONMENT"


def _allowed_env(stack: Stack, flavour: Flavour, components: dict[str, Component]) -> list[Finding]:
    """What the stack lets through [build] allow_env, shown: each loader variable a component's
    build_env sets reaches every process of its build (the compiler, uv, Python)."""
    found = []
    for component in components.values():
        names = sorted(name for name in component.build_env if runs_code(name) is not None)
        if names:
            text = (
                f"{component.name}.build_env sets {', '.join(names)}, allowed by [build] allow_env: "
                f"every process of its build sees {'it' if len(names) == 1 else 'them'}"
            )
            found.append(_finding(flavour, "build.allow_env", "info", text, LOADER_SOURCE))
    return found
