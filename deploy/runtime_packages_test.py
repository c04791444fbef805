#!/usr/bin/env python3
"""ctest runtime_packages_test: the packages of the image's runtime stage are enough, and no more.

deploy/Dockerfile's runtime stage is debian:bookworm-slim plus `apt-get install
--no-install-recommends` of deploy/runtime-packages.txt, and the files deploy/stage_image.sh laid
out in the build stage. Without Docker, this:
  1. stages those files as the build stage does (deploy/stage_image.sh: `cmake --install`,
     fashion_mnist, the entrypoint) into a scratch prefix;
  2. runs ldd on every ELF file there (executables and shared libraries): a "not found" fails;
  3. maps each library ldd resolves to the Debian package that holds it (dpkg -S, through
     SONAME links, /lib vs /usr/lib, and alternatives: libblas.so.3 is OpenBLAS's when
     libopenblas0-pthread is installed) and requires that package to be what the runtime stage
     installs (a listed package, or one apt pulls in for it: Depends and Pre-Depends, followed
     through this machine's installed packages) or in deploy/base-packages.txt (what
     debian:bookworm-slim already holds);
  4. requires every listed package to be installed here (a typo would otherwise surface only in
     a Docker build) and needed by some staged binary, unless its line says "# not linked: why";
  5. checks that the Dockerfile still installs that list and copies what was staged.

  deploy/runtime_packages_test.py BUILD_DIR [BINARY...]   (each BINARY must be staged in bin/)
Needs a built tree (every target `cmake --install` installs, and fashion_mnist when named).
Leaves nothing behind: the scratch prefix is removed on exit.
"""

import os
import re
import subprocess
import sys
import tempfile

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNTIME_LIST = os.path.join(SRC, "deploy", "runtime-packages.txt")
BASE_LIST = os.path.join(SRC, "deploy", "base-packages.txt")
DOCKERFILE = os.path.join(SRC, "deploy", "Dockerfile")


class Failure(Exception):
    pass


def names_in(path, only_not_linked=False):
    """Package names in a list file: one or more per line, "#" starts a comment."""
    names = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            body, _, comment = line.partition("#")
            if only_not_linked and not re.match(r"\s*not linked: \S", comment):
                continue
            names.update(body.split())
    return names


def run(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def installed_packages():
    """name -> (provides, [dependency groups, each a list of alternative names]) of every
    installed package."""
    out = run("dpkg-query", "-W", "-f=${Package}\t${Status}\t${Provides}\t${Pre-Depends}\t${Depends}\n")
    if out.returncode != 0:
        raise Failure(f"dpkg-query: {out.stderr.strip()}")
    packages = {}
    for line in out.stdout.splitlines():
        name, status, provides, pre_depends, depends = (line.split("\t") + [""] * 5)[:5]
        if not status.endswith("installed") or "not-installed" in status or "config-files" in status:
            continue
        strip = lambda d: re.split(r"[\s(:]", d.strip(), maxsplit=1)[0]
        groups = []
        for field in (pre_depends, depends):
            for group in field.split(","):
                alternatives = [strip(a) for a in group.split("|") if a.strip()]
                if alternatives:
                    groups.append(alternatives)
        packages[name] = ({strip(p) for p in provides.split(",") if p.strip()}, groups)
    return packages


def closure(roots, packages):
    """What `apt-get install --no-install-recommends ROOTS` installs, as far as this machine's
    installed packages tell: each dependency group is satisfied by an alternative (or a provider
    of it) already chosen, else by the first installed one."""
    providers = {}
    for name, (provides, _) in packages.items():
        for p in provides:
            providers.setdefault(p, []).append(name)
    chosen = set(roots)
    todo = list(roots)
    while todo:
        name = todo.pop()
        for group in packages.get(name, (set(), []))[1]:
            candidates = []
            for alternative in group:
                candidates += ([alternative] if alternative in packages else []) + providers.get(alternative, [])
            if not candidates or any(c in chosen for c in candidates):
                continue
            chosen.add(candidates[0])
            todo.append(candidates[0])
    return chosen


def candidates(path):
    """Where dpkg may have registered the library ldd found at `path`: the path itself, where its
    links lead (SONAME links, alternatives), each with and without /usr (merged /usr)."""
    out = []
    for p in (path, os.path.realpath(path)):
        bare = p[len("/usr"):] if p.startswith("/usr/") else p
        out += [p, bare, "/usr" + bare]
    return list(dict.fromkeys(out))


def packages_of(paths):
    """Library path -> the package that installed it (None when none did), from one dpkg -S over
    every candidate path (one call: each call reads dpkg's whole file database)."""
    wanted = sorted({c for p in paths for c in candidates(p)})
    owner = {}
    out = run("dpkg", "-S", *wanted) if wanted else None
    for line in out.stdout.splitlines() if out else []:
        if line.startswith("diversion"):
            continue
        packages, sep, path = line.partition(": ")
        if sep:
            owner.setdefault(path.strip(), packages.split(",")[0].split(":")[0].strip())
    return {p: next((owner[c] for c in candidates(p) if c in owner), None) for p in paths}


def is_elf(path):
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def check(build, required, prefix):
    runtime = names_in(RUNTIME_LIST)
    not_linked = names_in(RUNTIME_LIST, only_not_linked=True)
    base = names_in(BASE_LIST)
    if not runtime:
        raise Failure(f"{RUNTIME_LIST} names no package")

    # 5. The Dockerfile installs that list in its runtime stage and copies what was staged.
    with open(DOCKERFILE, encoding="utf-8") as f:
        dockerfile = f.read()
    for needle, what in (("deploy/runtime-packages.txt", "install deploy/runtime-packages.txt"),
                         ("deploy/stage_image.sh build /opt/asyncps", "stage with deploy/stage_image.sh"),
                         ("COPY --from=build /opt/asyncps/bin /opt/asyncps/bin", "copy /opt/asyncps/bin"),
                         ("FROM debian:bookworm-slim AS runtime", "run on debian:bookworm-slim")):
        if needle not in dockerfile:
            raise Failure(f"deploy/Dockerfile does not {what} ({needle!r} not found)")

    # 1. Stage.
    staged = run("bash", os.path.join(SRC, "deploy", "stage_image.sh"), build, prefix)
    if staged.returncode != 0:
        raise Failure(f"deploy/stage_image.sh {build} (build every installed target first):\n"
                      f"{staged.stdout[-3000:]}{staged.stderr[-3000:]}")
    for b in required:
        if not os.access(os.path.join(prefix, "bin", b), os.X_OK):
            raise Failure(f"the staged image has no bin/{b}")
    if not os.access(os.path.join(prefix, "entrypoint.sh"), os.X_OK):
        raise Failure("the staged image has no entrypoint.sh")

    # 2. Every ELF file's libraries, and 3. their packages.
    elves = sorted(os.path.join(d, f) for d, _, files in os.walk(prefix) for f in files
                   if is_elf(os.path.join(d, f)))
    if not elves:
        raise Failure("no ELF file under the staged prefix")
    linked = {}  # library path -> (file, library) first seen
    problems = []
    for elf in elves:
        rel = os.path.relpath(elf, prefix)
        out = run("ldd", elf)
        if out.returncode != 0:
            raise Failure(f"ldd {rel}: {out.stdout}{out.stderr}")
        for line in out.stdout.splitlines():
            if "=> not found" in line:
                problems.append(f"{rel} needs {line.split('=>')[0].strip()}: not found")
                continue
            m = re.search(r"=> (/\S+)", line) or re.match(r"\s*(/\S+) \(", line)
            if m is None or m.group(1).startswith(prefix + os.sep):
                continue  # linux-vdso.so.1
            linked.setdefault(m.group(1), (rel, os.path.basename(m.group(1))))
    libraries = packages_of(linked)  # library path -> package
    needed_by = {}  # package -> (file, library) first seen
    for lib, (rel, name) in sorted(linked.items()):
        if libraries[lib] is None:
            raise Failure(f"{lib} (needed by {rel}) belongs to no Debian package")
        needed_by.setdefault(libraries[lib], (rel, name))

    packages = installed_packages()
    installs = closure(runtime, packages)
    from_base = sorted(p for p in needed_by if p in base)
    for p, (rel, lib) in sorted(needed_by.items()):
        if p not in installs and p not in base:
            problems.append(f"{p} is needed ({rel} links {lib}) but neither deploy/runtime-packages.txt "
                            "nor what apt installs for it provides it")

    # 4. Every listed package is installed here and needed, or says why it is there.
    for p in sorted(runtime):
        if p not in packages:
            problems.append(f"{p} (deploy/runtime-packages.txt) is not an installed package here")
        if p not in needed_by and p not in not_linked:
            problems.append(f"{p} is in deploy/runtime-packages.txt but no staged file links it "
                            "(drop it, or say '# not linked: why')")
        if p in base:
            problems.append(f"{p} is in both deploy/runtime-packages.txt and deploy/base-packages.txt")
    if problems:
        raise Failure("\n  " + "\n  ".join(problems))
    print(f"runtime_packages_test: {len(elves)} ELF files link {len(libraries)} libraries from "
          f"{len(needed_by)} packages; the runtime stage's {len(runtime)} listed packages install "
          f"{len(installs)}; from the base image: {' '.join(from_base)}")


def main(argv):
    if len(argv) < 2:
        print(f"usage: {argv[0]} BUILD_DIR [BINARY...]", file=sys.stderr)
        return 2
    build = os.path.abspath(argv[1])
    with tempfile.TemporaryDirectory(prefix="runtime_packages_test_") as tmp:
        try:
            check(build, argv[2:], os.path.join(tmp, "prefix"))
        except Failure as e:
            print(f"runtime_packages_test: FAILED: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
