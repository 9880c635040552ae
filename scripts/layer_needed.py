#!/usr/bin/env python3
"""The shared libraries ELF files need, resolved in an extracted Debian tree.

usage: layer_needed.py ROOT TRIPLET FILE...

Follows every DT_NEEDED entry (readelf reads any architecture's ELF) recursively through
the tree's library folders and the files' own RPATH/RUNPATH, and prints one
`soname<TAB>path` line for each library found. A library found nowhere is named on
stderr and the exit status is 1: a layer missing one would fail at its first start.
"""
import os
import re
import subprocess
import sys


def needed(path):
    out = subprocess.run(["readelf", "-dW", path], capture_output=True, text=True, check=True).stdout
    names = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
    paths = re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library (?:runpath|rpath): \[([^\]]+)\]", out)
    return names, [entry for found in paths for entry in found.split(":")]


def main():
    root, triplet, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    # Debian 12's packages are not usr-merged: libc is under lib/. BLAS and LAPACK are
    # chosen by update-alternatives, which extracting never runs: their own folders.
    folders = [f"lib/{triplet}", f"usr/lib/{triplet}", "lib", "usr/lib", f"usr/lib/{triplet}/blas",
               f"usr/lib/{triplet}/lapack", f"usr/lib/{triplet}/pulseaudio"]
    found, missing, todo = {}, [], list(files)
    while todo:
        path = todo.pop()
        names, own = needed(path)
        own = [entry.replace("$ORIGIN", os.path.dirname(path)[len(root):]) for entry in own]
        for name in names:
            if name in found:
                continue
            places = (os.path.join(root, folder.lstrip("/"), name) for folder in own + folders)
            place = next((place for place in places if os.path.exists(place)), None)
            found[name] = place
            if place is None:
                missing.append((name, path))
            else:
                todo.append(place)
    for name, place in sorted(found.items()):
        if place:
            print(f"{name}\t{place}")
    for name, path in missing:
        print(f"[build-layer] {name}, needed by {path}, is in no package fetched", file=sys.stderr)
    sys.exit(1 if missing else 0)


if __name__ == "__main__":
    main()
