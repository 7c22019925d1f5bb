"""What is copied to a GPU machine for benchmarks/device_session.sh, against a limit: the working tree
(the files git tracks, and the untracked ones it does not ignore) and the ignored folders named on the
command line (``.whl``). A GPU session of this project takes 64 MiB in all; the check keeps a margin
under that (48 MiB by default), so that a larger tokenizer or a new wheel is seen here first.

    python benchmarks/carry_size.py .whl              # exit 1 when over --limit-mib
    python benchmarks/carry_size.py --limit-mib 48 .whl
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MIB = 1 << 20


def tree_bytes(repo: Path) -> int:
    """Bytes of the files that travel as the working tree: tracked, and untracked but not ignored."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo, capture_output=True, check=True,
    ).stdout  # fmt: skip
    total = 0
    for name in {n for n in out.decode().split("\0") if n}:
        path = repo / name
        if path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    return total


def folder_bytes(folder: Path) -> int:
    """Bytes of every file under ``folder`` (a file: its size; nothing there: 0)."""
    if folder.is_file():
        return folder.stat().st_size
    total = 0
    for root, _, files in os.walk(folder):
        total += sum((Path(root) / f).stat().st_size for f in files)
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("carry", nargs="*", help="the paths named in the device call's carry (relative to the repo)")
    parser.add_argument("--limit-mib", type=float, default=48.0)
    parser.add_argument("--repo", type=Path, default=REPO)
    args = parser.parse_args(argv)
    tree = tree_bytes(args.repo)
    parts = {name: folder_bytes(args.repo / name) for name in args.carry}
    total = tree + sum(parts.values())
    print(f"working tree {tree / MIB:.1f} MiB", flush=True)
    for name, size in parts.items():
        print(f"carried {name}: {size / MIB:.1f} MiB")
    verdict = "within" if total <= args.limit_mib * MIB else "OVER"
    print(f"carried in all: {total / MIB:.1f} MiB, {verdict} the limit of {args.limit_mib:g} MiB (the tool's: 64)")
    return 0 if verdict == "within" else 1


if __name__ == "__main__":
    sys.exit(main())
