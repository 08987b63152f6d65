"""Confirm link-check findings inside the target interpreter, the way its loader meets them.

Usage: python -I link_probe.py ITEMS.json

ITEMS.json is a list of {"id", "package", "object", "library", "kind", "executable"}.
For each owning package a child process (side by side, up to one per CPU) imports it (so whatever it preloads is mapped), then
each finding is tried in a grandchild forked from that state: is the object already mapped
(the import reached it), does loading it (ctypes.CDLL, as the loader links it) work, does the
dlopen'ed library load, and where the library was mapped from. One JSON list on stdout.
"""

import ctypes
import importlib
import json
import os
import signal
import sys

LOAD_SECONDS = 120


def mapped():
    """{realpath: path} of every file in this process's memory map."""
    paths = {}
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                parts = line.split(None, 5)
                if len(parts) == 6 and parts[5].startswith("/"):
                    path = parts[5].strip()
                    paths[os.path.realpath(path)] = path
    except OSError:
        pass
    return paths


def where_mapped(library):
    """The mapped file that answers for ``library`` (same name, or a longer version of it)."""
    for real, path in sorted(mapped().items()):
        for name in (os.path.basename(path), os.path.basename(real)):
            if name == library or name.startswith(library + "."):
                return path
    return None


def one_line(exc):
    """The line of the message that names a shared object (packages wrap the loader's
    message in advice), else its first line."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    named = [line for line in lines if ".so" in line]
    return "%s: %s" % (type(exc).__name__, (named or lines or [""])[0][:300])


def try_item(item):
    """What happens to one finding in a process where the owning package is imported."""
    result = {"id": item["id"]}
    result["reached"] = os.path.realpath(item["object"]) in mapped()
    load_error = None
    if item["kind"] == "dlopen-missing":
        try:
            ctypes.CDLL(item["library"])
        except OSError as exc:
            load_error = one_line(exc)
    elif not result["reached"]:
        if item.get("executable"):
            load_error = "an executable: nothing imports it, and it is not loaded in-process"
        else:
            try:
                # the loader's work only: an extension module is linked, not initialised
                ctypes.CDLL(item["object"])
            except OSError as exc:
                load_error = one_line(exc)
    result["load_error"] = load_error
    result["library_path"] = where_mapped(item["library"])
    return result


def start_forked(fn, arg):
    """Run fn(arg) in a forked child that writes its JSON result to a pipe: (pid, pipe)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        signal.alarm(LOAD_SECONDS)
        try:
            data = json.dumps(fn(arg))
        except BaseException as exc:  # noqa: BLE001 - the loaded library's failure, whatever it is, is this probe's answer
            data = json.dumps({"probe_error": one_line(exc)})
        _write_all(write, data.encode())
        os._exit(0)
    os.close(write)
    return pid, read


def _write_all(fd, data):
    while data:
        data = data[os.write(fd, data) :]


def finish_forked(pid, read):
    """The child's JSON result, or a description of how it died."""
    chunks = []
    while True:
        chunk = os.read(read, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    if chunks:
        return json.loads(b"".join(chunks).decode())
    if os.WIFSIGNALED(status):
        return {"probe_error": "the process was killed by signal %d" % os.WTERMSIG(status)}
    return {"probe_error": "the process exited %d without a result" % os.WEXITSTATUS(status)}


def run_forked(fn, arg):
    return finish_forked(*start_forked(fn, arg))


def package_group(group):
    """Import the package once, then try each finding in a fork of that state."""
    package, items = group
    import_error = None
    if package:
        try:
            importlib.import_module(package)
        except BaseException as exc:  # noqa: BLE001 - a failing import is a finding
            import_error = one_line(exc)
    results = []
    for item in items:
        answer = run_forked(try_item, item)
        answer.setdefault("id", item["id"])
        answer["import_error"] = import_error
        results.append(answer)
    return results


def main():
    with open(sys.argv[1]) as fh:
        items = json.load(fh)
    groups = {}
    for item in items:
        groups.setdefault(item.get("package") or "", []).append(item)
    results = []
    packages = sorted(groups)
    width = max(1, min(len(packages), os.cpu_count() or 1))
    for start in range(0, len(packages), width):  # packages side by side, one process each
        running = [(p, start_forked(package_group, (p, groups[p]))) for p in packages[start : start + width]]
        for package, (pid, read) in running:
            answer = finish_forked(pid, read)
            if isinstance(answer, dict):  # the import itself took the process down
                answer = [dict(answer, id=i["id"], import_error=answer.get("probe_error")) for i in groups[package]]
            results.extend(answer)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
