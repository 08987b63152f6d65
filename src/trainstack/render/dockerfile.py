"""The Dockerfile of one flavour. Pure: text from the stack, the flavour's layers and its lock entry.

Stages, least to most often changed: base -> system (packages, Python venv) -> torch -> extras;
each source component gets a fetch stage (network, no compiler) and a compile stage that
bind-mounts the fetched tree and leaves only a wheel; the final stage installs those wheels
from bind mounts, so no source tree and no toolchain ends up in an image layer. Lock files are
COPYed, not bind-mounted, so that every builder keys its layer cache on their content. The CA bundle
arrives as the build secret "ca" and index credentials as the build secret "netrc" (pip reads
~/.netrc), never as ARG, ENV or COPY.

Every value from the stack is checked against its grammar again here and quoted for where it
goes (trainstack.render.quote), so that even a stack that skipped validation renders no extra line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from trainstack import grammar
from trainstack.buildenv import arch_env, budget_for, compiler_cache_env, nvcc_arch_flags, probe_arch
from trainstack.errors import SpecError
from trainstack.lock.layers import FlavourLayers, SourceBuild
from trainstack.render import quote
from trainstack.rules import nvcc_package, os_pythons
from trainstack.rules.nvcc import Route, debian_route, devel_route, wheel_route
from trainstack.stackfile.matrix import Flavour, base_of
from trainstack.stackfile.schema import PYTHON_RE, CompilerCache, Stack

VENV = "/opt/venv"
UV_HOME = "/opt/uv"  # the uv that installs a standalone Python where the OS has none
STANDALONE_PYTHONS = "/opt/python"
CA = "/run/secrets/ca"
DEBOOTSTRAP_PREFIX = "debootstrap:"
# Uses the CA secret when the build was given one; pip, git, curl and uv each read their own variable.
WITH_CA = f"if [ -f {CA} ]; then export PIP_CERT={CA} GIT_SSL_CAINFO={CA} CURL_CA_BUNDLE={CA} SSL_CERT_FILE={CA}; fi"
NETRC = "/root/.netrc"
# the CA bundle and the index credentials, present in the RUN steps that reach the network only
SECRET = f"--mount=type=secret,id=ca,target={CA} --mount=type=secret,id=netrc,target={NETRC}"
LOCKS = "/opt/trainstack/locks"
COMPILER_CACHE = "/root/.cache/compiler"
UV = f"{UV_HOME}/bin/uv"
# uv installs into the image's venv (pip only downloads sdists in the fetch stages)
UV_INSTALL = f"{UV} pip install --no-deps --require-hashes --no-cache --python {VENV}/bin/python"
CUDA_HOME = "/opt/cuda"  # links into the toolchain's nvidia wheels, in the compile stages only
DEBIAN_CUDA_HOME = "/usr"  # Debian's nvidia-cuda-toolkit: /usr/bin/nvcc, /usr/include/cuda_runtime.h
PROBE = "__global__ void trainstack_probe(float* x) { x[threadIdx.x] *= 2.0f; }"


@dataclass(frozen=True)
class Base:
    ref: str  # what FROM names
    debootstrap_suite: str | None  # set when the base is built locally with debootstrap


def base_for(stack: Stack, flavour: Flavour) -> Base:
    found = base_of(stack, flavour)
    if found is None:
        known = ", ".join(sorted(stack.build.base)) or "none"
        raise SpecError(
            f"build.base: no base image for flavour {flavour.slug} (keys given: {known})",
            hint=f'add build.base."{flavour.os}" = "debootstrap:bookworm" or a registry ref',
        )
    key, value = found
    value = quote.one_line(value, f"build.base.{grammar.shown(key)}")
    try:
        grammar.base_image(value)
    except ValueError as exc:
        raise SpecError(f"build.base.{grammar.shown(key)}: {exc}") from None
    if value.startswith(DEBOOTSTRAP_PREFIX):
        suite = value.removeprefix(DEBOOTSTRAP_PREFIX)
        return Base(f"localhost/trainstack-base:{suite}", suite)
    return Base(value, None)


def stage_name(component_key: str) -> str:
    name = re.sub(r"[^a-z0-9]+", "-", component_key.lower()).strip("-")
    if not name:
        raise SpecError(f"components.{grammar.shown(component_key)}: no stage name can be made of it")
    return name


def source_file(src: SourceBuild) -> str:
    return f"sources/{stage_name(src.component.key)}.txt"


def locked_commit(src: SourceBuild) -> str:
    """The full sha the lock pinned (servers fetch by full sha only), else the stack's commit."""
    match = re.search(r"@([0-9a-f]{40})\s*$", src.entry_text.strip())
    found = match.group(1) if match else str(src.component.commit)
    return quote.matching(found, grammar.HEX_COMMIT, f"components.{src.component.name}.commit", "a git commit")


def labels(stack: Stack, layers: FlavourLayers) -> dict[str, str]:
    return {
        "org.opencontainers.image.title": stack.stack.image_ref,
        "org.opencontainers.image.version": stack.stack.release,
        "io.trainstack.stack": stack.stack.name,
        "io.trainstack.release": stack.stack.release,
        "io.trainstack.flavour": layers.flavour.slug,
        "io.trainstack.cache-key": layers.locked.cache_key,
        "io.trainstack.lock-sha256": layers.locked.lock_sha256,
    }


def render_dockerfile(stack: Stack, layers: FlavourLayers, uv_version: str) -> str:
    base = base_for(stack, layers.flavour)
    parts = [_header(base), _system(stack, layers, uv_version), _torch(), _extras()]
    toolchain = _debian_toolchain(layers, stack)
    if toolchain:
        parts.append(toolchain)
    for src in layers.sources:
        parts += [_fetch(src), _compile(src, layers, stack, "toolchain" if toolchain else "extras")]
    parts.append(_final(stack, layers))
    return "\n".join(parts)


def _header(base: Base) -> str:
    origin = (
        f"# base: built from Debian's archive with 'debootstrap {quote.comment(base.debootstrap_suite)}' "
        f"and imported as {quote.comment(base.ref)}\n"
        if base.debootstrap_suite
        else ""
    )
    return f"# syntax=docker/dockerfile:1.7\n{origin}FROM {base.ref} AS base\n"


def _system(stack: Stack, layers: FlavourLayers, uv_version: str) -> str:
    py = quote.matching(layers.flavour.python, PYTHON_RE, "matrix.python", "a Python version such as 3.12")
    ccache = ["ccache"] if stack.build.compiler_cache.kind == "ccache" and layers.sources else []
    from_archive = py in os_pythons(stack.rules_in_effect, layers.flavour.os)
    pythons = [f"python{py}", f"python{py}-venv"] if from_archive else ["python3", "python3-venv"]
    if from_archive and layers.sources:  # Python.h for the extensions compiled against the archive's Python
        pythons.append(f"python{py}-dev")
    packages = [
        quote.shell(
            quote.matching(p, re.compile(r"[a-z0-9][a-z0-9+.-]+(=[0-9][A-Za-z0-9.+~:-]*)?"), "build.system_packages", "a Debian package"),
            "build.system_packages",
        )
        for p in sorted({*stack.build.system_packages, *pythons, *ccache})
    ]
    return (
        "FROM base AS system\n"
        'SHELL ["/bin/bash", "-o", "pipefail", "-c"]\n'
        "ENV DEBIAN_FRONTEND=noninteractive\n"
        '# apt versions move with the base\'s archive; a stack pins one as build.system_packages = ["name=version"]\n'
        "# hadolint ignore=DL3008\n"
        f"RUN {SECRET} \\\n"
        f"    {WITH_CA}; \\\n"
        "    apt-get update \\\n"
        f"    && apt-get install -y --no-install-recommends {' '.join(packages)} \\\n"
        "    && rm -rf /var/lib/apt/lists/* \\\n"
        + (
            f"    && python{py} -m venv {VENV} \\\n{_uv(f'python{py}', uv_version)}\n"
            if from_archive
            else _standalone_python(py, uv_version)
        )
        + f"ENV VIRTUAL_ENV={VENV} PATH={VENV}/bin:$PATH PIP_DISABLE_PIP_VERSION_CHECK=1\n"
    )


def _standalone_python(py: str, uv_version: str) -> str:
    """The flavour's Python where the OS archive has none: uv's standalone build, with the
    uv release that made the lock, in a venv seeded with pip for the later stages."""
    return (
        f"{_uv('python3', uv_version)} \\\n"
        f"    && UV_PYTHON_INSTALL_DIR={STANDALONE_PYTHONS} {UV_HOME}/bin/uv python install {py} \\\n"
        f"    && UV_PYTHON_INSTALL_DIR={STANDALONE_PYTHONS} {UV_HOME}/bin/uv venv --seed --python {py} {VENV}\n"
    )


def _uv(python: str, uv_version: str) -> str:
    """uv in a venv of its own (the release that made the lock): every install of the image goes through it."""
    pin = f"=={uv_version}" if re.fullmatch(r"[0-9][0-9A-Za-z.+-]*", uv_version) else ""
    return f"    && {python} -m venv {UV_HOME} \\\n    && {UV_HOME}/bin/pip install --no-cache-dir uv{pin}"


def _install(stage: str, parent: str, lock_name: str) -> str:
    # COPY (not a bind mount) so that every builder keys its layer cache on the lock's content
    return (
        f"FROM {parent} AS {stage}\n"
        f"COPY {lock_name} {LOCKS}/{lock_name}\n"
        f"RUN {SECRET} \\\n"
        f"    {WITH_CA}; \\\n"
        f"    {UV_INSTALL} -r {LOCKS}/{lock_name}\n"
    )


def _torch() -> str:
    return _install("torch", "system", "torch.txt")


def _extras() -> str:
    return _install("extras", "torch", "extras.txt")


def _fetch(src: SourceBuild) -> str:
    name = stage_name(src.component.key)
    comp = src.component
    if comp.git is not None:
        get = (
            f"git init -q /src/{name} \\\n"
            f"    && git -C /src/{name} fetch -q --depth 1 -- {_git_url(comp.name, comp.git)} {locked_commit(src)} \\\n"
            f"    && git -C /src/{name} checkout -q FETCH_HEAD"
        )
    elif comp.path is not None:
        raise SpecError(
            f"components.{comp.name}.path: a local path source cannot be built in an image",
            hint="use --backend venv, or give the component a version or a git source",
        )
    else:
        get = f"pip download --no-deps --no-binary :all: --require-hashes --no-cache-dir -d /src/{name} -r {LOCKS}/{source_file(src)}"
    return (
        f"FROM system AS fetch-{name}\nCOPY {source_file(src)} {LOCKS}/{source_file(src)}\nRUN {SECRET} \\\n    {WITH_CA}; \\\n    {get}\n"
    )


def _git_url(component: str, url: str) -> str:
    try:
        grammar.git_url(url)
    except ValueError as exc:
        raise SpecError(f"components.{grammar.shown(component)}.git: {exc}") from None
    return quote.shell(url, f"components.{component}.git")


def _build_env(component: str, build_env: dict[str, str]) -> str:
    what = f"components.{grammar.shown(component)}.build_env"
    return " ".join(
        f"{quote.matching(k, grammar.ENV_NAME, what, 'an environment variable name')}={quote.shell(v, what)}"
        for k, v in sorted(build_env.items())
    )


def _debian(layers: FlavourLayers, stack: Stack) -> Route | None:
    """The Debian archive's nvcc for a CUDA flavour with extensions whose release has no nvcc wheel."""
    flavour = layers.flavour
    if flavour.cuda == "cpu" or not stack.toolchain.nvcc or not layers.sources:
        return None
    if wheel_route(stack.rules_in_effect, flavour.cuda) is not None:
        return None
    return debian_route(stack.rules_in_effect, flavour.cuda, flavour.os)


def _debian_toolchain(layers: FlavourLayers, stack: Stack) -> str:
    """The toolchain stage of a flavour on a Debian base whose archive packages nvcc of the
    flavour's CUDA: the archive component that holds it enabled (deb822 .sources files and the
    one-line sources.list alike), the toolkit installed pinned to its exact Debian version."""
    route = _debian(layers, stack)
    debian = stack.rules_in_effect.cuda.debian
    if route is None or route.debian is None or debian is None:
        return ""
    what = "rules cuda.debian"
    package = quote.matching(
        f"{debian.package}={route.debian.version}",
        re.compile(r"[a-z0-9][a-z0-9+.-]+=[0-9][A-Za-z0-9.+~:-]*"),
        what,
        "a Debian package pinned to its version",
    )
    component = quote.matching(debian.component, grammar.DEBIAN_COMPONENT, what, "a Debian archive component")
    enable = f"/{component}( |$)/! s/^(Components: .*main.*|deb .* main.*)$/\\1 {component}/"
    return (
        "FROM extras AS toolchain\n"
        f"# nvcc of CUDA {quote.comment(route.debian.cuda)}: {quote.comment(route.text)}\n"
        f"RUN {SECRET} \\\n"
        f"    {WITH_CA}; \\\n"
        "    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.sources; do \\\n"
        f'      if [ -f "$f" ]; then sed -i -E {quote.shell(enable, what)} "$f"; fi; \\\n'
        "    done \\\n"
        "    && apt-get update \\\n"
        f"    && apt-get install -y --no-install-recommends {quote.shell(package, what)} \\\n"
        "    && rm -rf /var/lib/apt/lists/*\n"
    )


def _compile(src: SourceBuild, layers: FlavourLayers, stack: Stack, parent: str = "extras") -> str:
    name = stage_name(src.component.key)
    budget = budget_for(src.component)
    cache = stack.build.compiler_cache
    arg = f"{name.upper().replace('-', '_')}_MAX_JOBS"
    env = _build_env(src.component.name, {**_cuda_env(layers, stack, cache), **src.component.build_env})
    tool = (
        f"COPY toolchain.txt {LOCKS}/toolchain.txt\nRUN {SECRET} \\\n    {WITH_CA}; \\\n    {UV_INSTALL} -r {LOCKS}/toolchain.txt\n"
        if layers.toolchain.entries
        else ""
    )
    target = f"/src/{name}" if src.component.git is not None else f"/src/{name}/*"
    return (
        f"FROM {parent} AS compile-{name}\n"
        f"# MAX_JOBS: trainstack build passes its cgroup-aware CPU count / {budget.divisor}, capped at {budget.cap};\n"
        f"# any other build (docker buildx bake, docker build) takes the same budget of the CPUs it sees (nproc)\n"
        f"ARG {arg}=\n"
        f"{tool}"
        f"RUN --mount=type=bind,from=fetch-{name},source=/src/{name},target=/src/{name},rw \\\n"
        f"{_cache_mount(cache)}"
        f'    jobs=$(( $(nproc) / {budget.divisor} )); [ "$jobs" -le {budget.cap} ] || jobs={budget.cap}; '
        f'[ "$jobs" -ge 1 ] || jobs=1; \\\n'
        f"    {_cuda_home(layers, stack)}MAX_JOBS=${{{arg}:-$jobs}} {_cache_env(cache)}{env} \\\n"
        f"    {UV} build --wheel --no-build-isolation --python {VENV}/bin/python --out-dir /wheels/{name} {target}\n"
    )


def _nvcc(layers: FlavourLayers, stack: Stack) -> bool:
    """The compile stages use the toolchain wheels' nvcc (the flavour's release has an nvcc wheel, locked)."""
    if layers.flavour.cuda == "cpu" or not stack.toolchain.nvcc or wheel_route(stack.rules_in_effect, layers.flavour.cuda) is None:
        return False
    return layers.toolchain.get(nvcc_package(stack.rules_in_effect, layers.flavour.cuda).split("==")[0]) is not None


def _home(layers: FlavourLayers, stack: Stack) -> str | None:
    """The CUDA home of the compile stages: the wheels' links, Debian's /usr, a CUDA devel base
    image's own (/usr/local/cuda), else none."""
    if _nvcc(layers, stack):
        return CUDA_HOME
    if _debian(layers, stack) is not None:
        return DEBIAN_CUDA_HOME
    flavour = layers.flavour
    if flavour.cuda == "cpu" or not stack.toolchain.nvcc or not layers.sources or wheel_route(stack.rules_in_effect, flavour.cuda):
        return None
    found = base_of(stack, flavour)
    route = devel_route(stack.rules_in_effect, flavour.cuda, found[1] if found is not None else None, stack.build.base_cuda.get(flavour.os))
    if route is None or route.home is None:
        return None
    return quote.matching(route.home, grammar.ABSOLUTE_DIR, "rules cuda.devel_image.cuda_home", "an absolute folder")


def _cuda_home(layers: FlavourLayers, stack: Stack) -> str:
    """CUDA flavours: a CUDA home of links into the toolchain's nvidia wheels (merged, with the
    unversioned libcudart.so the linker asks for), then a one-line kernel compiled for the first
    GPU target, so a broken toolchain fails here with nvcc's own error."""
    home = _home(layers, stack)
    if home is None:
        return ""
    arch = quote.matching(
        probe_arch(stack.rules_in_effect, list(stack.toolchain.archs), layers.flavour.cuda),
        re.compile(r"[0-9]{2,3}[af]?"),
        "toolchain.archs",
        "an sm number such as 90",
    )
    flags = " ".join(nvcc_arch_flags(arch))
    probe = f"printf '%s\\n' '{PROBE}' > /tmp/probe.cu \\\n    && {home}/bin/nvcc {flags} -c /tmp/probe.cu -o /tmp/probe.o \\\n    && "
    if home != CUDA_HOME:
        return probe
    return (
        f"mkdir -p {CUDA_HOME}/lib64 \\\n"
        f"    && for d in {VENV}/lib/python*/site-packages/nvidia/*/; do \\\n"
        f'         for sub in bin include nvvm; do if [ -d "$d$sub" ]; then cp -rsn "$d$sub" {CUDA_HOME}/; fi; done; \\\n'
        f'         if [ -d "${{d}}lib" ]; then cp -rsn "${{d}}lib/." {CUDA_HOME}/lib64/; fi; \\\n'
        f"       done \\\n"
        f'    && for f in {CUDA_HOME}/lib64/lib*.so.*; do ln -sfn "$(basename "$f")" "${{f%%.so.*}}.so"; done \\\n'
        f"    && {probe}"
    )


def _cuda_env(layers: FlavourLayers, stack: Stack, cache: CompilerCache) -> dict[str, str]:
    """CUDA_HOME, the stack's GPU targets as each package's variable, DeepSpeed's CUDA ops on a
    builder without a GPU, nvcc through ccache (torch.utils.cpp_extension reads PYTORCH_NVCC)."""
    home = _home(layers, stack)
    if home is None:
        return {}
    env = {"CUDA_HOME": home, **arch_env(list(stack.toolchain.archs))}
    if stack.toolchain.archs:  # GPU targets named on a builder without a GPU: else DeepSpeed picks its CPU accelerator
        env["DS_ACCELERATOR"] = "cuda"
    if cache.kind == "ccache":
        env["PYTORCH_NVCC"] = f"ccache {home}/bin/nvcc"
    return env


def _cache_mount(cache: CompilerCache) -> str:
    return "" if cache.kind == "none" else f"    --mount=type=cache,target={COMPILER_CACHE} \\\n"


def _cache_env(cache: CompilerCache) -> str:
    """The compiler cache inside the compile stage: a BuildKit cache mount, sized as the stack says."""
    if cache.kind == "none":
        return ""
    # the system stage installs ccache; sccache is not a distribution package everywhere
    env = compiler_cache_env(cache.model_copy(update={"dir": COMPILER_CACHE}), Path("/"), launcher=cache.kind == "ccache")
    return "".join(f"{k}={quote.shell(v, 'build.compiler_cache')} " for k, v in sorted(env.items()))


def _final(stack: Stack, layers: FlavourLayers) -> str:
    lines = ["FROM extras AS final"]
    for src in layers.sources:
        name = stage_name(src.component.key)
        lines.append(
            f"RUN --mount=type=bind,from=compile-{name},source=/wheels/{name},target=/tmp/wheels/{name} \\\n"
            f"    {UV} pip install --no-deps --no-cache --python {VENV}/bin/python /tmp/wheels/{name}/*.whl"
        )
    label = " \\\n      ".join(f"{quote.dockerfile_string(k)}={quote.dockerfile_string(v)}" for k, v in labels(stack, layers).items())
    lines.append(f"LABEL {label}")
    if stack.env:  # the stack's [env], in the last layer: changing it rebuilds nothing below
        settings = " \\\n    ".join(
            f"{quote.matching(name, grammar.ENV_NAME, 'env', 'an environment variable name')}="
            f"{quote.dockerfile_string(quote.matching(value, grammar.ENV_VALUE, f'env.{name}', 'printable ASCII'))}"
            for name, value in stack.env.items()
        )
        lines.append(f"ENV {settings}")
    return "\n".join(lines) + "\n"
