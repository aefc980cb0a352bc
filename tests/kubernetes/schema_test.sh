#!/usr/bin/env bash
# schema_test.sh CACHE_DIR: deploy/kubernetes* against the Kubernetes schemas,
# offline, with no cluster (none is packaged for Debian 12):
#  - every manifest (check_manifests.js, npm kubernetes-models + js-yaml);
#  - every kustomization rendered by kubectl kustomize or kustomize, when one
#    is installed (else said and skipped), and its output validated;
#  - corrupted copies must fail, so the check is known to bite;
#  - yamllint, when installed.
# The npm packages are installed once into CACHE_DIR (outside the source
# tree). No node or npm, or no npm registry: exit 77 (skip).
set -uo pipefail
C=$(mkdir -p "${1:?cache dir}" && cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
DEPLOY=$(cd "$HERE/../../deploy" && pwd)
DIRS=("$DEPLOY"/kubernetes*/)
if ! command -v node > /dev/null || ! command -v npm > /dev/null; then
  echo "SKIP: node and npm are needed (apt-get install nodejs npm)"; exit 77
fi
# Pinned: the versions this check was written against.
PKGS=(kubernetes-models@4.5.1 js-yaml@4.3.2)
# Looked for in CACHE_DIR itself: `node -e` would also find packages in any
# node_modules above the current directory, which check_manifests.js
# (resolving from its own directory) does not see.
if [ ! -f "$C/node_modules/kubernetes-models/package.json" ] || [ ! -f "$C/node_modules/js-yaml/package.json" ]; then
  echo "installing ${PKGS[*]} into $C"
  # One quick retry: offline, npm's default retries take minutes.
  timeout 60 npm install --prefix "$C" --no-audit --no-fund --no-save --loglevel=error \
    --fetch-retries=1 --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=5000 \
    "${PKGS[@]}" > "$C/npm.log" 2>&1
  rc=$?
  if [ $rc != 0 ]; then
    [ $rc = 124 ] && echo "npm install: no answer in 60 s" >> "$C/npm.log"
    echo "SKIP: cannot install ${PKGS[*]} from npm (offline?): $(tail -3 "$C/npm.log")"; exit 77
  fi
fi
export NODE_PATH="$C/node_modules"
check() { node "$HERE/check_manifests.js" "$@"; }
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

check "${DIRS[@]}" || fail "a manifest does not match the Kubernetes schemas"

render=()
if command -v kubectl > /dev/null; then render=(kubectl kustomize)
elif command -v kustomize > /dev/null; then render=(kustomize build); fi
for d in "${DIRS[@]}"; do
  [ -f "$d/kustomization.yaml" ] || continue
  if [ ${#render[@]} = 0 ]; then echo "skipped: rendering $d (no kubectl or kustomize)"; continue; fi
  if out=$("${render[@]}" "$d" 2>&1); then
    echo "rendered $d with ${render[*]}:"
    echo "$out" | check - || fail "the rendered $d does not match the schemas"
  else fail "${render[*]} $d: $out"; fi
done

# Negative checks: each corrupted copy must fail, naming the broken field.
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
corrupt() { # NAME FILE SED-EXPR FIELD
  sed -e "$3" "$DEPLOY/kubernetes/$2" > "$T/$1.yaml"
  if cmp -s "$DEPLOY/kubernetes/$2" "$T/$1.yaml"; then fail "corrupting $2 ($3) changed nothing"
  elif check "$T/$1.yaml" > "$T/$1.out" 2>&1; then fail "the corrupted $2 ($3) passed"
  elif grep -q "$4" "$T/$1.out"; then echo "ok: the corrupted $2 fails: $(grep -m1 FAIL "$T/$1.out")"
  else fail "the corrupted $2 failed without naming $4: $(cat "$T/$1.out")"; fi
}
corrupt replicas head-statefulset.yaml 's/replicas: 1/replicas: one/' "replicas must be integer"
corrupt port head-statefulset.yaml 's/containerPort: 6380/containerPort: "6380"/' "containerPort must be integer"
corrupt name node-daemonset.yaml 's/- name: node$/- nam: node/' "required property name"
corrupt kind driver-job.yaml 's/^kind: Job/kind: Jobb/' "no schema"

if command -v yamllint > /dev/null; then
  yamllint -s -d '{extends: default, rules: {line-length: {max: 100}, document-start: disable}}' \
    "${DIRS[@]}" && echo "ok: yamllint" || fail "yamllint"
else
  echo "skipped: yamllint (not installed)"
fi
echo "schema_test: $failures failure(s)"
[ "$failures" = 0 ]
