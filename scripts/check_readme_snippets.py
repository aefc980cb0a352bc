#!/usr/bin/env python3
"""check_readme_snippets.py: every ```cpp and ```python block of README.md is lines of an example.

    python3 scripts/check_readme_snippets.py [--readme README.md] [--examples examples]

GitHub renders README.md without mkdocs, so its C++ code is a copy; this
check keeps the copy honest: each ```cpp block must appear verbatim, as
consecutive lines, in some file under examples/ (which the test suite
compiles and runs). Snippet marker comments (`// --8<-- [start:name]`,
`[end:name]`) in the examples are skipped when comparing. Exits 1 naming
each block that matches no example, and the first line where the closest
file differs.
"""

import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = re.compile(r"^\s*(?://|#)\s*--8<--\s*\[(start|end):[\w-]+\]\s*$")
FENCE = re.compile(r"^```\s*(\S*)\s*$")


def blocks(text):
    """(line number, [lines]) of every ```cpp / ```c++ block."""
    out, cur, start, lang = [], None, 0, None
    for i, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if cur is None and m and m.group(1):
            lang, cur, start = m.group(1).lower(), [], i
        elif cur is None and m:
            lang, cur, start = "", [], i
        elif cur is not None and line.strip() == "```":
            if lang in ("cpp", "c++", "python"):
                out.append((start, cur))
            cur = None
        elif cur is not None:
            cur.append(line)
    return out


def example_files(folder):
    for base, _, files in os.walk(folder):
        for f in sorted(files):
            if f.endswith((".cpp", ".hpp", ".h", ".cc", ".py")):
                path = os.path.join(base, f)
                with open(path, encoding="utf-8") as fh:
                    lines = [l for l in fh.read().splitlines() if not MARKER.match(l)]
                yield path, lines


def find(block, files):
    """(path, None) where block occurs, else (closest path, first differing line)."""
    best = (None, -1, None)
    n = len(block)
    for path, lines in files:
        for i in range(len(lines)):
            k = 0
            while k < n and i + k < len(lines) and lines[i + k] == block[k]:
                k += 1
            if k == n:
                return path, None
            if k > best[1]:
                best = (path, k, block[k] if k < n else None)
    return best[0], best


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--readme", default=os.path.join(ROOT, "README.md"))
    ap.add_argument("--examples", default=os.path.join(ROOT, "examples"))
    args = ap.parse_args()
    with open(args.readme, encoding="utf-8") as f:
        found = blocks(f.read())
    files = list(example_files(args.examples))
    bad = 0
    for start, block in found:
        while block and not block[-1].strip():
            block = block[:-1]
        if not block:
            continue
        path, miss = find(block, files)
        if miss is None:
            print(f"ok: README.md:{start}: {len(block)} lines from {os.path.relpath(path, ROOT)}")
        else:
            bad += 1
            _, k, line = miss
            print(f"README.md:{start}: this ```cpp block is not lines of any file under "
                  f"examples/ (closest: {path and os.path.relpath(path, ROOT)}, "
                  f"which differs at the block's line {k + 1}: {line!r})", file=sys.stderr)
    if not found:
        print("no ```cpp blocks in README.md")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
