#!/usr/bin/env python3
"""Build, on a machine with pip's index, what an air-gapped node needs to install cemlab: a
wheelhouse of cemlab and its dependencies at the versions of ``requirements/constraints.txt``
(torch excluded: the node brings its own), compressed into parts under a size limit when asked,
and the script that installs it there without a network (docs/gpu.md).

    python3 scripts/offline-bundle.py --out offline-bundle --python-version 3.12 \\
        --installed scripts/gpu-image-packages.txt --part-size 48M

What goes in: cemlab's wheel (built from this checkout) and every distribution its requirements
reach (extras such as ``ray[tune]`` followed, environment markers evaluated for the node's Python
and Linux x86-64), each at its pinned version, plus ``--with`` names; not torch, and not the names
listed in ``--installed`` (the node already has them, with their own dependencies) unless their
wheel is small (``--keep-small``, default 2 MiB: a fallback for a node whose version is too old
or too new for a requirement, e.g. pydantic's typing-extensions>=4.16). A reachable
distribution that the constraints do not pin is an error naming it. ``--only`` restricts the
bundle to the names given (and cemlab), for a small bundle (the test suite builds one).

What comes out, in ``--out``:

- ``cemlab-offline-K-of-N.tar``: the parts; each holds wheels recompressed with xz (every wheel's
  members stored uncompressed first, which xz packs far tighter than the wheel's own deflate:
  ray 2.60's 79 MB wheel becomes 56 MB), never more than ``--part-size`` bytes per part; a wheel
  that alone is larger is cut into pieces across parts (``NAME.whl.xz.K-of-N``). Without
  ``--part-size``: one part.
- ``install.sh``: ``sh install.sh`` unpacks every part beside it (``unpack``: the parts may arrive
  one at a time; each adds its wheels, and a wheel cut into pieces is joined once all of them are
  unpacked) into ``wheelhouse/`` and installs cemlab with pip, offline:
  ``python3 -m pip install --no-index --find-links wheelhouse cemlab`` (``install [pip args]``:
  other requirements or options). It refuses a Python other than the bundle's, naming both.
- ``MANIFEST.txt``: the target, the parts, the install command, every wheel with its size and its
  SHA-256 as unpacked and as pip's index serves it.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import lzma
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

ROOT = Path(__file__).resolve().parents[1]
#: Never bundled: the node's own accelerator build of torch is kept.
NEVER = {"torch"}
#: manylinux tags a Linux x86-64 node of glibc 2.17 or later accepts (pip matches tags exactly).
LINUX_PLATFORMS = ["manylinux1_x86_64", "manylinux2010_x86_64", "manylinux2014_x86_64",
                   *[f"manylinux_2_{n}_x86_64" for n in range(17, 40)]]


class BundleError(RuntimeError):
    pass


def read_names(path: Path) -> set[str]:
    """Distribution names of a file of ``name``, ``name==version`` or ``pip list`` lines (``#`` comments)."""
    names = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.lower().startswith(("package ", "---")):
            names.add(canonicalize_name(re.split(r"[\s=<>!~;\[]", line, maxsplit=1)[0]))
    return names


def read_pins(path: Path) -> dict[str, str]:
    """name -> pinned version of a constraints file (``name==version`` lines)."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[canonicalize_name(name)] = version.split(";")[0].strip()
    return pins


def marker_env(python_version: str | None) -> dict[str, str]:
    """The environment markers are evaluated in: this interpreter's, or a Linux x86-64 CPython of
    ``python_version``."""
    env = default_environment()
    if python_version:
        full = python_version if python_version.count(".") == 2 else python_version + ".0"
        env.update(python_version=".".join(full.split(".")[:2]), python_full_version=full, sys_platform="linux",
                   platform_system="Linux", platform_machine="x86_64", os_name="posix",
                   implementation_name="cpython", platform_python_implementation="CPython")
    return env


def requires(wheel: Path) -> list[str]:
    """The ``Requires-Dist`` lines of a wheel's METADATA."""
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        return Parser().parsestr(z.read(name).decode()).get_all("Requires-Dist") or []


def needed(req_lines: list[str], extras: set[str], env: dict[str, str]) -> list[Requirement]:
    """The requirements among ``req_lines`` that apply in ``env`` with ``extras`` asked for."""
    out = []
    for line in req_lines:
        r = Requirement(line)
        if r.marker is None or any(r.marker.evaluate({**env, "extra": e}) for e in (extras or {""})):
            out.append(r)
    return out


def pip_download(names: list[str], pins: dict[str, str], dest: Path, args) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(dest), "-q",
           "--disable-pip-version-check"]
    if args.python_version:
        cmd += ["--python-version", args.python_version, "--implementation", "cp"]
        for p in LINUX_PLATFORMS:
            cmd += ["--platform", p]
    if args.find_links:
        cmd += ["--no-index", "--find-links", str(args.find_links)]
    cmd += [f"{n}=={pins[n]}" for n in names]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise BundleError(f"pip download failed for {', '.join(names)}:\n{done.stderr.strip()[-2000:]}")


def build_cemlab_wheel(dest: Path) -> Path:
    """cemlab's wheel from this checkout: with the running environment's setuptools (no index
    needed), else in pip's isolated build environment (setuptools from pip's index)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", ".venv", "runs", "reports", "build", "dist",
                                                                 "*.egg-info", "__pycache__", "offline-bundle*",
                                                                 ".gpu-session"))
        cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dest), str(src)]
        done = subprocess.run(cmd[:4] + ["--no-build-isolation"] + cmd[4:], capture_output=True, text=True)
        if done.returncode:
            done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            raise BundleError(f"building cemlab's wheel failed:\n{done.stderr.strip()[-2000:]}")
    return next(dest.glob("cemlab-*.whl"))


def collect(args, wheels: Path) -> list[Path]:
    """cemlab's wheel and every pinned wheel its requirements reach, downloaded into ``wheels``. A
    distribution the node has (``--installed``) is bundled only when its wheel is at most
    ``--keep-small`` bytes (pip then takes it only where the node's version misses a requirement),
    and what it needs is followed only then."""
    pins = read_pins(args.constraints)
    installed = read_names(args.installed) if args.installed else set()
    only = {canonicalize_name(n) for n in args.only} if args.only else None
    env = marker_env(args.python_version)
    cemlab = build_cemlab_wheel(wheels)
    todo = [(r.name, set(r.extras)) for r in needed(requires(cemlab), set(), env)]
    todo += [(n, set()) for n in args.with_]
    files: dict[str, Path] = {"cemlab": cemlab}
    left_out = set(NEVER)   # never bundled, or the node's own and too large to bring as a fallback
    seen: set[tuple[str, frozenset]] = set()
    while todo:
        level = []
        for name, extras in todo:
            n = canonicalize_name(name)
            if n in left_out or (only is not None and n not in only) or (n, frozenset(extras)) in seen:
                continue
            if n not in pins and n in installed:   # the node's, and no pinned version to fall back on
                left_out.add(n)
                continue
            seen.add((n, frozenset(extras)))
            level.append((n, extras))
        fetch = sorted({n for n, _ in level if n not in files})
        missing = [n for n in fetch if n not in pins]
        if missing:
            raise BundleError(f"{', '.join(missing)}: needed but not pinned in {args.constraints}; pin "
                              f"{'them' if len(missing) > 1 else 'it'} there (make constraints) or list "
                              f"{'them' if len(missing) > 1 else 'it'} in --installed")
        if fetch:
            pip_download(fetch, pins, wheels, args)
            for n in fetch:
                found = [w for w in wheels.glob("*.whl") if canonicalize_name(parse_wheel_filename(w.name)[0]) == n]
                if not found:
                    raise BundleError(f"pip downloaded no wheel of {n}=={pins[n]}")
                if n in installed and found[0].stat().st_size > args.keep_small:
                    found[0].unlink()
                    left_out.add(n)
                else:
                    files[n] = found[0]
        todo = [(r.name, set(r.extras)) for n, extras in level if n in files
                for r in needed(requires(files[n]), extras, env)]
    return sorted(files.values())


def stored_copy(wheel: Path) -> bytes:
    """The wheel with every member stored uncompressed (the same files and RECORD: a valid wheel)."""
    out = io.BytesIO()
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = src.read(info)
            copy = zipfile.ZipInfo(info.filename, info.date_time)
            copy.external_attr, copy.compress_type = info.external_attr, zipfile.ZIP_STORED
            dst.writestr(copy, data)
    return out.getvalue()


def compress(wheel: Path, level: int) -> tuple[str, bytes]:
    """The SHA-256 of the wheel as it will be unpacked (its stored copy) and that copy, xz-compressed."""
    data = stored_copy(wheel)
    dict_size = min(max(1 << 20, 1 << (len(data) - 1).bit_length()), 192 << 20)
    filters = [{"id": lzma.FILTER_LZMA2, "preset": level | lzma.PRESET_EXTREME, "dict_size": dict_size}]
    return hashlib.sha256(data).hexdigest(), lzma.compress(data, format=lzma.FORMAT_XZ, filters=filters)


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+)([KMG]?)", text.strip().upper())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size; give bytes or a number with K, M or G, e.g. 60M")
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]


#: The most a tar file adds after its last member: the end blocks, padded to tarfile's record size.
TAR_END = tarfile.RECORDSIZE


def _member_cost(size: int) -> int:
    """Bytes a member of ``size`` bytes takes in a part: its headers (a long name adds a pax header) and data."""
    return 3 * 512 + -(-size // 512) * 512


def pack(items: list[tuple[str, bytes]], limit: int | None) -> list[list[tuple[str, bytes]]]:
    """The compressed wheels grouped into parts of at most ``limit`` bytes as tar files: largest
    first, each into the first part with room for it, else into a new part. A wheel too large for
    a part of its own is cut into pieces, ``NAME.K-of-N``, each filling a new part but the last,
    which goes where it fits like any other member; install.sh joins them once it has unpacked
    every piece."""
    parts: list[list[tuple[str, bytes]]] = []
    sizes: list[int] = []

    def place(name: str, blob: bytes) -> None:
        cost = _member_cost(len(blob))
        for i in range(len(parts)):
            if limit is None or sizes[i] + cost + TAR_END <= limit:
                parts[i].append((name, blob))
                sizes[i] += cost
                return
        parts.append([(name, blob)])
        sizes.append(cost)

    if limit is not None and _member_cost(1) + TAR_END > limit:
        raise BundleError(f"--part-size {limit:,} cannot hold a part's tar headers and end "
                          f"({_member_cost(1) + TAR_END:,} bytes at least); give a larger --part-size, e.g. 48M")
    for name, blob in sorted(items, key=lambda x: -len(x[1])):
        if limit is None or _member_cost(len(blob)) + TAR_END <= limit:
            place(name, blob)
            continue
        room = (limit - TAR_END - _member_cost(0)) // 512 * 512   # a new part's room for one piece's data
        pieces = [blob[i:i + room] for i in range(0, len(blob), room)]
        for k, piece in enumerate(pieces, 1):
            place(f"{name}.{k}-of-{len(pieces)}", piece)
    return parts


#: A piece of a wheel cut across parts: ``NAME.whl.xz.K-of-N``.
PIECE = re.compile(r"(?P<wheel>.+\.whl)\.xz\.(?P<k>\d+)-of-(?P<n>\d+)")


INSTALL_SH = r"""#!/bin/sh
# Installs cemlab offline from the parts beside this file (written by scripts/offline-bundle.py).
#   sh install.sh                  unpack every part here, then install cemlab
#   sh install.sh unpack           unpack the parts here into wheelhouse/ (parts may come one at a time;
#                                  a wheel cut across parts is joined once all its pieces are unpacked)
#   sh install.sh install [ARGS]   python3 -m pip install --no-index --find-links wheelhouse ARGS (default: cemlab)
# PYTHON=/path/to/python3 picks the interpreter (default python3).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}
want="@PYTHON@"
have=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ -n "$want" ] && [ "$have" != "$want" ]; then
  echo "install.sh: this bundle holds wheels for Python $want; $py is Python $have. Rebuild it on a connected machine: python3 scripts/offline-bundle.py --python-version $have ..." >&2
  exit 2
fi
unpack() {
  mkdir -p "$here/wheelhouse"
  found=0
  for part in "$here"/cemlab-offline-*-of-*.tar; do
    [ -e "$part" ] || continue
    found=1
    "$py" - "$part" "$here/wheelhouse" <<'EOF'
import lzma, re, sys, tarfile
from pathlib import Path
part, dest = sys.argv[1], Path(sys.argv[2])
pieces = dest / ".pieces"   # a wheel cut across parts waits here for its other pieces

def put(name, data):
    tmp = dest / (name + ".part")
    tmp.write_bytes(lzma.decompress(data))
    tmp.replace(dest / name)

with tarfile.open(part) as t:
    for m in t.getmembers():
        if not m.isfile() or "/" in m.name:
            continue
        if m.name.endswith(".whl.xz"):
            put(m.name[:-3], t.extractfile(m).read())
            continue
        piece = re.fullmatch(r"(.+\.whl)\.xz\.(\d+)-of-(\d+)", m.name)
        if piece:
            pieces.mkdir(exist_ok=True)
            (pieces / m.name).write_bytes(t.extractfile(m).read())
            wheel, n = piece.group(1), int(piece.group(3))
            names = [pieces / f"{wheel}.xz.{k}-of-{n}" for k in range(1, n + 1)]
            if all(p.is_file() for p in names):
                put(wheel, b"".join(p.read_bytes() for p in names))
                for p in names:
                    p.unlink()
                print(f"  {wheel}: its {n} pieces joined")
for p in sorted(pieces.glob("*")) if pieces.is_dir() else []:
    print(f"  {p.name}: waiting for the other pieces of its wheel (their parts are not unpacked yet)")
print(f"unpacked {part}")
EOF
  done
  if [ "$found" = 0 ]; then echo "install.sh: no part (cemlab-offline-K-of-N.tar) in $here" >&2; exit 2; fi
}
install() {
  if [ "$#" = 0 ]; then set -- cemlab; fi
  "$py" -m pip install --no-index --find-links "$here/wheelhouse" "$@"
}
case "${1:-all}" in
  unpack) unpack ;;
  install) shift; install "$@" ;;
  all) unpack; install ;;
  *) echo "install.sh: unknown step '$1'; use unpack, install [pip args] or nothing" >&2; exit 2 ;;
esac
"""


def write_bundle(args, wheels: list[Path]) -> list[Path]:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("cemlab-offline-*-of-*.tar"):
        old.unlink()
    items, unpacked = [], {}
    for w in wheels:
        print(f"  compressing {w.name} ({w.stat().st_size / 2**20:.1f} MiB)", flush=True)
        unpacked[w.name], blob = compress(w, args.level)
        items.append((w.name + ".xz", blob))
    groups = pack(items, args.part_size)
    paths = []
    for k, group in enumerate(groups, 1):
        path = out / f"cemlab-offline-{k}-of-{len(groups)}.tar"
        with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as t:   # wheel names pass 100 characters
            for name, blob in sorted(group):
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(blob), 0o644, 0
                t.addfile(info, io.BytesIO(blob))
        paths.append(path)
    target = args.python_version or ".".join(map(str, sys.version_info[:2]))
    want = ".".join(target.split(".")[:2])
    (out / "install.sh").write_text(INSTALL_SH.replace("@PYTHON@", want))
    (out / "install.sh").chmod(0o755)
    lines = [f"cemlab offline bundle: Python {want}, "
             f"{'Linux x86-64 (manylinux)' if args.python_version else 'the building machine'}; torch not included",
             f"install on the node: sh install.sh   (= python3 -m pip install --no-index --find-links wheelhouse cemlab)",
             "", "parts:"]
    lines += [f"  {p.name}  {p.stat().st_size:,} bytes" for p in paths]
    cut: dict[str, list[str]] = {}
    for path, group in zip(paths, groups):
        for name, _ in group:
            if PIECE.fullmatch(name):
                cut.setdefault(PIECE.fullmatch(name)["wheel"], []).append(path.name)
    lines += [f"  {wheel} is cut into {len(ps)} pieces, in {', '.join(ps)}: install.sh joins them once all are unpacked"
              for wheel, ps in cut.items()]
    lines += ["", "wheels (sha256: as unpacked into wheelhouse/, its members stored uncompressed; "
              "index-sha256: the file pip downloaded, the same members deflated):"]
    for w in wheels:
        digest = hashlib.sha256(w.read_bytes()).hexdigest()
        lines.append(f"  {w.name}  {w.stat().st_size:,} bytes  sha256={unpacked[w.name]}  index-sha256={digest}")
    (out / "MANIFEST.txt").write_text("\n".join(lines) + "\n")
    return paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="folder for the parts, install.sh and MANIFEST.txt")
    p.add_argument("--python-version", help="the node's Python, e.g. 3.12 (wheels for Linux x86-64); default: this one's")
    p.add_argument("--constraints", type=Path, default=ROOT / "requirements" / "constraints.txt",
                   help="the pinned versions (default requirements/constraints.txt)")
    p.add_argument("--installed", type=Path,
                   help="a file of distribution names the node already has: bundled only when small (--keep-small)")
    p.add_argument("--keep-small", type=parse_size, default=parse_size("2M"), metavar="SIZE",
                   help="still bundle the pinned wheel of a distribution the node has when it is at most SIZE "
                        "(default 2M): pip takes it where the node's version misses a requirement; 0: never")
    p.add_argument("--with", dest="with_", action="append", default=[], metavar="NAME",
                   help="also bundle NAME and what it needs (repeatable), e.g. --with pytest --with pytest-timeout")
    p.add_argument("--only", action="append", metavar="NAME", help="bundle only these names (and cemlab)")
    p.add_argument("--part-size", type=parse_size, help="most bytes per part, e.g. 48M (default: one part)")
    p.add_argument("--level", type=int, default=9, choices=range(0, 10), help="xz preset, 0-9 (default 9, extreme)")
    p.add_argument("--find-links", type=Path, help="take wheels from this folder only, not pip's index")
    args = p.parse_args(argv)
    for path in (args.constraints, args.installed):
        if path is not None and not path.is_file():
            p.error(f"{path}: no such file")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            wheels = collect(args, Path(tmp))
            total = sum(w.stat().st_size for w in wheels)
            print(f"{len(wheels)} wheels, {total / 2**20:.1f} MiB; compressing", flush=True)
            parts = write_bundle(args, wheels)
    except BundleError as e:
        print(f"offline-bundle: {e}", file=sys.stderr)
        return 2
    size = sum(x.stat().st_size for x in parts)
    print(f"{len(parts)} part(s), {size / 2**20:.1f} MiB in all, in {args.out}:")
    for x in parts:
        print(f"  {x.name}  {x.stat().st_size / 2**20:.1f} MiB")
    print(f"On the node, with the parts and install.sh in one folder: sh {args.out}/install.sh")
    return 0


if __name__ == "__main__":
    sys.exit(main())
