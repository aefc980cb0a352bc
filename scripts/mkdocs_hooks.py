"""mkdocs_hooks.py: named snippet sections for mkdocs (the `hooks:` entry of mkdocs.yml).

Debian 12's pymdownx (9.5) includes whole files only (`--8<-- "examples/x.cpp"`);
sections came in 9.7. This hook gives the pages the 9.7 syntax now:

    --8<-- "examples/quickstart.cpp:worker"

on a line of its own is replaced, before pymdownx.snippets runs, by the lines
between the comment lines

    // --8<-- [start:worker]
    // --8<-- [end:worker]

of that file (paths from the repository root; marker lines inside the section
are dropped). A missing file, section or end marker fails the build, so a page
never shows a stale or empty snippet. Whole-file includes are left to
pymdownx.snippets, except for files with markers: those are included here,
without their marker lines.
"""

import os
import re

from mkdocs.exceptions import PluginError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INCLUDE = re.compile(r'^(\s*)--8<--\s+"([^":]+)(?::([A-Za-z_][\w-]*))?"\s*$')
MARKER = re.compile(r"^\s*(?://|#)\s*--8<--\s*\[(start|end):([\w-]+)\]\s*$")


def read(path, name):
    full = os.path.join(ROOT, path)
    if not os.path.isfile(full):
        raise PluginError(f"snippet {path}{':' + name if name else ''}: no such file")
    with open(full, encoding="utf-8") as f:
        return f.read().splitlines()


def section(path, name):
    lines = read(path, name)
    out, inside, found = [], False, False
    for line in lines:
        m = MARKER.match(line)
        if m:
            if m.group(2) == name:
                if m.group(1) == "start":
                    inside, found = True, True
                elif inside:
                    return out
            continue
        if inside:
            out.append(line)
    if not found:
        raise PluginError(f"snippet {path}:{name}: no '--8<-- [start:{name}]' line")
    raise PluginError(f"snippet {path}:{name}: no '--8<-- [end:{name}]' line")


def on_page_markdown(markdown, page, config, files, **kwargs):
    out = []
    for line in markdown.split("\n"):
        m = INCLUDE.match(line)
        if m and m.group(3):
            lines = section(m.group(2), m.group(3))
        elif m and os.path.isfile(os.path.join(ROOT, m.group(2))):
            lines = read(m.group(2), None)
            if not any(MARKER.match(s) for s in lines):
                out.append(line)  # pymdownx.snippets includes it
                continue
            lines = [s for s in lines if not MARKER.match(s)]
        else:
            out.append(line)
            continue
        out.extend(m.group(1) + s if s else s for s in lines)
    return "\n".join(out)


def on_config(config, **kwargs):
    # pymdownx.snippets resolves base_path against the working directory;
    # the repository root makes `mkdocs build -f .../mkdocs.yml` work from
    # anywhere (ctest runs it from the build tree).
    snippets = config["mdx_configs"].setdefault("pymdownx.snippets", {})
    snippets["base_path"] = [ROOT]
    return config
