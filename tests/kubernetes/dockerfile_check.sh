#!/usr/bin/env bash
# dockerfile_check.sh [BUILD_DIR]: a check of the Dockerfile without docker:
# statically, and with BUILD_DIR its install steps run on that build.
# Checks:
#  - every COPY source exists in the repository and is not in .dockerignore;
#  - every script a RUN step runs is a repository file that COPY put there,
#    and both stages run setup.sh (the project's dependencies, as CI
#    installs them);
#  - its cmake configure and build commands are scripts/build.sh's (which
#    scripts/test.sh runs) with only the build directory, the build type
#    (Release instead of RelWithDebInfo) and extra -D options (build.sh's
#    "$@") that CMakeLists.txt declares with option() differing;
#  - it installs into /usr/local the paths that deploy/kubernetes runs:
#    hvactor-node and hvactor-run (install(TARGETS) rules) and
#    /usr/local/libexec/hvactor/<example> (an example target, which for
#    LibTorch examples needs HVACTOR_WITH_TORCH=1 as the default).
# Not checked: that the image builds (apt, compiler, the build without CUDA),
# that it runs, the base image.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
F="$ROOT/Dockerfile"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }
# The Dockerfile with continuation lines joined.
text=$(sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$F")

while read -r src; do
  [ "$src" = "." ] && continue
  if [ ! -e "$ROOT/$src" ]; then fail "COPY $src: no such file"
  elif grep -qxF -e "$src" -e "${src%%/*}/" "$ROOT/.dockerignore" 2> /dev/null; then
    fail "COPY $src: excluded by .dockerignore"
  else ok "COPY $src exists"; fi
done < <(echo "$text" | grep -E '^COPY ' | grep -v -- '--from=' | awk '{print $2}')

# A script a RUN step runs: a COPY destination (its source checked above) or
# a path under a directory that COPY . fills.
copies=$(echo "$text" | grep -E '^COPY ' | grep -v -- '--from=')
while read -r script; do
  src=$(echo "$copies" | awk -v d="$script" '$3 == d {print $2}')
  whole=$(echo "$copies" | awk '$2 == "." {print $3}')
  [ -z "$src" ] && [ -n "$whole" ] && src=${script#"$whole"/}
  [ -n "$src" ] && [ -f "$ROOT/$src" ] && ok "RUN bash $script: $src" \
    || fail "RUN bash $script: not a file COPY puts there"
done < <(echo "$text" | grep -E '^RUN ' | grep -oE 'bash [^ ]+' | awk '{print $2}')
n=$(echo "$text" | grep -cE '^RUN bash [^ ]*setup\.sh')
[ "$n" = 2 ] && ok "both stages run setup.sh" || fail "setup.sh runs in $n stage(s), not 2"
grep -q 'scripts/build.sh' "$ROOT/scripts/test.sh" || fail "scripts/test.sh no longer runs scripts/build.sh"

# Configure: -B DIR and the build type's value normalized, extra options apart.
words() { echo "$1" | grep -oE "$2" | head -1 | sed 's/&&.*//'; }
ci_conf=$(words "$(cat "$ROOT/scripts/build.sh")" 'cmake -S [^"]*')
df_conf=$(words "$text" 'cmake -S [^&]*')
dir=$(echo "$df_conf" | grep -oE -- '-B [^ ]+' | awk '{print $2}')
norm() { echo "$1" | sed -E 's/-B [^ ]+/-B DIR/; s/-DCMAKE_BUILD_TYPE=[A-Za-z]+/-DCMAKE_BUILD_TYPE=TYPE/'; }
extra=$(norm "$df_conf" | tr ' ' '\n' | grep -E '^-D' | grep -v CMAKE_BUILD_TYPE)
base=$(norm "$df_conf" | tr ' ' '\n' | grep -vxF -e "$extra" | xargs)
[ "$base" = "$(norm "$ci_conf" | xargs)" ] && ok "configure is build.sh's: $ci_conf" \
  || fail "configure '$df_conf' differs from build.sh's '$ci_conf'"
echo "$df_conf" | grep -q -- '-DCMAKE_BUILD_TYPE=Release' && ok "Release" || fail "not a Release build"
for d in $extra; do
  opt=${d#-D}; opt=${opt%%=*}
  grep -q "option($opt " "$ROOT/CMakeLists.txt" && ok "$d is an option() of CMakeLists.txt" \
    || fail "$d: no option($opt) in CMakeLists.txt"
done
ci_build=$(grep -oE 'cmake --build .*' "$ROOT/scripts/build.sh" | sed -E 's/--build [^ ]+/--build DIR/')
df_build=$(echo "$text" | grep -oE 'cmake --build [^&]*' | sed -E "s|--build $dir|--build DIR|; s/ +$//")
[ "$df_build" = "$ci_build" ] && ok "build is build.sh's: $ci_build" \
  || fail "build '$df_build' differs from build.sh's '$ci_build'"
echo "$text" | grep -q "cmake --install $dir --prefix /usr/local" && ok "installs $dir into /usr/local" \
  || fail "no 'cmake --install $dir --prefix /usr/local'"

# What the manifests run.
for tool in hvactor-node hvactor-run; do
  grep -q "install(TARGETS $tool " "$ROOT/tools/CMakeLists.txt" && ok "$tool is installed" \
    || fail "$tool has no install(TARGETS) rule"
done
echo "$text" | grep -q "/build/examples .*-t /usr/local/libexec/hvactor" \
  || fail "the examples are not installed into /usr/local/libexec/hvactor"
for prog in $(grep -ohE '/usr/local/libexec/hvactor/[A-Za-z0-9_]+' "$ROOT"/deploy/kubernetes/*.yaml | sort -u); do
  name=${prog##*/}
  if ! grep -q "add_executable($name " "$ROOT/examples/CMakeLists.txt"; then fail "$prog: no example $name"
  elif sed -n '/if(HVACTOR_HAVE_TORCH)/,/endif()/p' "$ROOT/examples/CMakeLists.txt" | grep -q "($name "; then
    grep -q '^ARG HVACTOR_WITH_TORCH=1' "$F" && ok "$prog (LibTorch: HVACTOR_WITH_TORCH=1 by default)" \
      || fail "$prog needs LibTorch but the Dockerfile's HVACTOR_WITH_TORCH default is not 1"
  else ok "$prog is an example"; fi
done
# With BUILD_DIR (ctest passes it): the install steps run for real on that
# build, into a scratch prefix, and every installed tool and the driver
# Job's program start from there.
if [ -n "${1:-}" ]; then
  B=$(cd "$1" && pwd); P=$(mktemp -d); trap 'rm -rf "$P"' EXIT
  if cmake --install "$B" --prefix "$P/usr/local" > "$P/install.log" 2>&1; then
    ok "cmake --install of $B into a scratch /usr/local"
  else fail "cmake --install: $(tail -3 "$P/install.log")"; fi
  mkdir -p "$P/usr/local/libexec/hvactor"
  find "$B/examples" -maxdepth 1 -type f -perm -u+x -exec install -m 0755 -t "$P/usr/local/libexec/hvactor" {} +
  export LD_LIBRARY_PATH="$P/usr/local/lib:$P/usr/local/lib/$(gcc -print-multiarch 2> /dev/null)"
  for tool in hvactor-node hvactor-run hvactor-up hvactor-down hvactor-bench; do
    "$P/usr/local/bin/$tool" --help > /dev/null 2>&1 && ok "the installed $tool runs" \
      || fail "the installed $tool is missing or does not run"
  done
  for prog in $(grep -ohE '/usr/local/libexec/hvactor/[A-Za-z0-9_]+' "$ROOT"/deploy/kubernetes/*.yaml | sort -u); do
    if [ -x "$P$prog" ]; then ok "$prog installed"
    elif [ ! -x "$B/examples/${prog##*/}" ]; then echo "skipped: $prog (not built here: no LibTorch)"
    else fail "$prog not installed"; fi
  done
fi
echo "dockerfile_check: $failures failure(s)"
[ "$failures" = 0 ]
