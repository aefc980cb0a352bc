#!/usr/bin/env python3
"""check_layers.py: the include graph runs one way.

Layers, bottom up: runtime -> collectives -> actors -> torch -> tools. A file
may include headers of its own layer and of the layers below it, never above.
Prints every upward include and exits 1 if there is one; also checks that no
installed (public) header includes an internal one.

    python3 scripts/check_layers.py [ROOT]
"""
import os
import re
import sys

LAYERS = ["runtime", "collectives", "actors", "torch", "tools"]
RANK = {"runtime": 0, "collectives": 1, "actors": 2, "torch": 3, "tools": 4}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)


def header_layer(root, include, including_file):
    """The layer a quoted or angled include resolves to, or None (system)."""
    here = os.path.dirname(including_file)
    if os.path.exists(os.path.join(here, include)):
        return layer_of(root, os.path.join(here, include))
    for layer in LAYERS:
        if os.path.exists(os.path.join(root, layer, include)):
            return layer
    return None


def layer_of(root, path):
    rel = os.path.relpath(path, root).split(os.sep)
    return rel[0] if rel[0] in RANK else None


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    problems = []
    files = 0
    for layer in LAYERS:
        for d, _, names in os.walk(os.path.join(root, layer)):
            for name in names:
                if not name.endswith((".hpp", ".cpp", ".cu")):
                    continue
                path = os.path.join(d, name)
                files += 1
                public = (os.sep + "hvactor" + os.sep) in path and os.sep + "internal" + os.sep not in path
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                for inc in INCLUDE.findall(text):
                    target = header_layer(root, inc, path)
                    if target is None:
                        continue
                    rel = os.path.relpath(path, root)
                    if RANK[target] > RANK[layer] or (RANK[target] == RANK[layer] and target != layer):
                        problems.append(f"{rel}: includes {inc} from {target}/ (above {layer}/)")
                    if public and inc.startswith("internal/"):
                        problems.append(f"{rel}: a public header includes the internal {inc}")
    for p in problems:
        print(p)
    print(f"check_layers: {files} files, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
