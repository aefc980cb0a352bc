#!/usr/bin/env python3
"""check_layers.py: the include graph runs one way.

Floors, bottom up:
  base        errors, settings of processes, logging, spawning, the code
              registry; base/net: transport, TLS, the CA, the connection
              watchdog, the port guard, the OpenSSL error-queue fix
  collectives the hvd API, engine, backends, the rendezvous client
  actors      the typed actors and their plain policies, settings and
              discovery
  driver      hvactor::runtime, executor, launcher, job session, futures
  train       hvactor::train, horovod_runner
  tune        hvactor::tune: search spaces, searchers, schedulers, the tuner
  torch       the LibTorch adapter
  python      the Python package (hvactor.torch) and its extension
  tools       hvactor-node, hvactor-run, hvactor-up, hvactor-bench
A file may include headers of its own floor and of the floors below it,
never above. Internal headers are included by a path that names their
floor ("actors/coordinator/coordinator.hpp", "base/net/tls.hpp"); public ones
as "hvactor/x.hpp". Prints every upward include, every internal include
that does not name its floor, and every public (installed) header that
includes an internal one; exits 1 if there is any.

    python3 scripts/check_layers.py [ROOT]
"""
import os
import re
import sys

LAYERS = ["base", "collectives", "actors", "driver", "train", "tune", "torch", "python", "tools"]
RANK = {name: i for i, name in enumerate(LAYERS)}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)


def layer_of(root, path):
    rel = os.path.relpath(path, root).split(os.sep)
    return rel[0] if rel[0] in RANK else None


def header_layer(root, include, including_file):
    """The floor an include resolves to, or None (system, third party)."""
    here = os.path.dirname(including_file)
    if os.path.exists(os.path.join(here, include)):
        return layer_of(root, os.path.join(here, include))
    first = include.split("/")[0]
    if first in RANK and os.path.exists(os.path.join(root, include)):
        return first
    for layer in LAYERS:
        if os.path.exists(os.path.join(root, layer, include)):
            return layer
    return None


def problems_of(root, path, layer):
    rel = os.path.relpath(path, root)
    public = (os.sep + "hvactor" + os.sep) in path
    with open(path, encoding="utf-8") as f:
        text = f.read()
    out = []
    for inc in INCLUDE.findall(text):
        target = header_layer(root, inc, path)
        if target is None:
            continue
        here = os.path.exists(os.path.join(os.path.dirname(path), inc))
        first = inc.split("/")[0]
        if RANK[target] > RANK[layer]:
            out.append(f"{rel}: includes {inc} from {target}/ (above {layer}/)")
        if not here and first not in RANK and first != "hvactor":
            out.append(f"{rel}: includes the internal {inc} without its floor "
                       f"(write \"{target}/{inc}\")")
        if public and (first in RANK or not inc.startswith("hvactor/")) and not here:
            out.append(f"{rel}: a public header includes the internal {inc}")
    return out


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    problems = []
    files = 0
    for layer in LAYERS:
        for d, _, names in os.walk(os.path.join(root, layer)):
            for name in names:
                if name.endswith((".hpp", ".cpp", ".cu")):
                    files += 1
                    problems += problems_of(root, os.path.join(d, name), layer)
    for p in problems:
        print(p)
    print(f"check_layers: {files} files, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
