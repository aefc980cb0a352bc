#!/usr/bin/env bash
# dockerfile_check.sh BUILD_DIR: the Dockerfile's steps without docker (no
# docker here). Checks: every COPY source exists; its RUN steps use
# scripts/setup.sh (what CI installs with); its cmake configure command,
# flags included, configures this tree (in a scratch dir); its install
# steps, run against BUILD_DIR's build into a scratch prefix, give the
# binaries the manifests start (hvactor-node, hvactor-run, hvactor-up,
# hvactor-down, libexec/hvactor/spmd_train), and each runs --help from
# there. Not checked: the debian:bookworm base layers and the Release build
# itself (CI builds RelWithDebInfo).
set -uo pipefail
B=$(realpath "${1:?build dir}"); ROOT=$(cd "$(dirname "$0")/../.." && pwd)
F="$ROOT/Dockerfile"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# COPY sources (not --from=, not ".").
while read -r src; do
  [ "$src" = "." ] && continue
  [ -e "$ROOT/$src" ] && echo "ok: COPY $src exists" || fail "COPY $src: no such file"
done < <(grep -E '^COPY ' "$F" | grep -v -- '--from=' | awk '{print $2}')
grep -q 'RUN bash scripts/setup.sh' "$F" && echo "ok: the build stage installs with scripts/setup.sh" \
  || fail "the build stage does not run scripts/setup.sh"
# The configure command with its flags, against a scratch build dir.
configure=$(grep -oE 'cmake -S \. -B /build[^&\\]*' "$F" | head -1)
[ -n "$configure" ] || fail "no 'cmake -S . -B /build' step"
flags=$(echo "$configure" | sed 's|cmake -S \. -B /build||')
if (cd "$ROOT" && cmake -S . -B "$T/build" $flags -DHVACTOR_BUILD_TESTS=OFF > "$T/configure.log" 2>&1); then
  echo "ok: configure with the Dockerfile's flags:$flags"
else fail "configure with$flags: $(tail -5 "$T/configure.log")"; fi
# Its install steps, on the existing build.
cmake --install "$B" --prefix "$T/usr/local" > "$T/install.log" 2>&1 || fail "cmake --install: $(tail -3 "$T/install.log")"
spmd=$(grep -oE 'install -D -m 0755 /build/examples/spmd_train [^ ]+' "$F" | awk '{print $NF}')
[ -n "$spmd" ] && install -D -m 0755 "$B/examples/spmd_train" "$T$spmd" || fail "no spmd_train install step"
export LD_LIBRARY_PATH="$T/usr/local/lib:$T/usr/local/lib/$(gcc -print-multiarch 2>/dev/null)"
for bin in hvactor-node hvactor-run hvactor-up hvactor-down; do
  if "$T/usr/local/bin/$bin" --help > /dev/null 2>&1; then echo "ok: installed $bin runs --help"
  else fail "installed $bin missing or failing"; fi
done
[ -x "$T$spmd" ] && echo "ok: $spmd (the driver Job's program) installed" || fail "$spmd missing"
echo "dockerfile_check: $failures failure(s)"
[ "$failures" = 0 ]
