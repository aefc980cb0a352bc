#!/usr/bin/env python3
"""check_architecture.py: docs/architecture.dot matches the tree.

Every floor the diagram draws (floor="...") is a folder, and they are the
floors scripts/check_layers.py enforces (plus base/net); every file a node
names (file="...") exists; docs/architecture.svg is the .dot's rendering
(Graphviz's dot; exit 77, skipped, when dot is not installed and the rest
holds).

    python3 scripts/check_architecture.py [ROOT]
"""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_layers import LAYERS  # noqa: E402


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    dot_path = os.path.join(root, "docs", "architecture.dot")
    svg_path = os.path.join(root, "docs", "architecture.svg")
    text = open(dot_path, encoding="utf-8").read()
    text = re.sub(r"//[^\n]*", "", text)  # comments name the attributes too
    problems = []
    floors = re.findall(r'floor="([^"]+)"', text)
    files = re.findall(r'file="([^"]+)"', text)
    want = set(LAYERS) | {"base/net"}
    for f in floors:
        if not os.path.isdir(os.path.join(root, f)):
            problems.append(f"floor {f}/ is not a folder")
    if set(floors) != want:
        problems.append(f"floors drawn {sorted(set(floors))}, floors of check_layers.py "
                        f"{sorted(want)}")
    for f in files:
        if not os.path.isfile(os.path.join(root, f)):
            problems.append(f"{f} (a node's file) does not exist")
    if not files:
        problems.append("no node names a file")
    for p in problems:
        print(p)
    if problems:
        print(f"check_architecture: {len(problems)} problem(s)")
        return 1
    if shutil.which("dot") is None:
        print("check_architecture: floors and files match; dot not installed, the SVG is not "
              "checked")
        return 77
    svg = subprocess.run(["dot", "-Tsvg", dot_path], check=True, capture_output=True).stdout
    if not os.path.exists(svg_path) or open(svg_path, "rb").read() != svg:
        print("docs/architecture.svg is not the rendering of docs/architecture.dot: run "
              "scripts/architecture.sh")
        return 1
    print(f"check_architecture: {len(floors)} floors, {len(files)} files, SVG up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
