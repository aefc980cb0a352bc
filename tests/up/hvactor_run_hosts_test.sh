#!/usr/bin/env bash
# hvactor_run_hosts_test.sh BUILD_DIR: hvactor-run -H / --hostfile against a
# real sshd on 127.0.0.1 (a throwaway host key and user key, its own port):
# the job's nodes come up over ssh with a CA of their own, the job runs on
# them, and nothing is left afterwards (processes, files there and here).
# Skips (77) without root or without sshd/ssh.
#   1. -H localhost:2,127.0.0.1:2: 4 ranks, 2 on each node; nothing left
#   2. --hostfile (slots=1 and slots=2) with -np 3; nothing left
#   3. a host that cannot be reached: named, exit 1, nothing left
#   4. SIGTERM to hvactor-run mid-job: ranks and nodes stopped, nothing left
set -uo pipefail
B=$(realpath "${1:?build dir}")
RUN="$B/tools/hvactor-run"; PROG="$B/tests/integration/run_program"
SSHD=$(command -v sshd || echo /usr/sbin/sshd)
if [ "$(id -u)" != 0 ] || [ ! -x "$SSHD" ] || ! command -v ssh >/dev/null; then
  echo "SKIP: needs root, sshd and ssh (scripts/setup.sh installs openssh-server)"; exit 77
fi
D=$(mktemp -d /tmp/hvactor-run-hosts.XXXXXX); chmod 755 "$D"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
SSH_PORT=$(free_port)
REMOTE_HOME=$(getent passwd "$(id -un)" | cut -d: -f6)
cleanup() {
  [ -f "$D/sshd.pid" ] && kill "$(cat "$D/sshd.pid")" 2>/dev/null
  rm -rf "$D"
}
trap cleanup EXIT
ssh-keygen -q -t ed25519 -N '' -f "$D/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$D/id"
cp "$D/id.pub" "$D/authorized_keys"
mkdir -p /run/sshd
cat > "$D/sshd_config" <<CONF
Port $SSH_PORT
ListenAddress 127.0.0.1
HostKey $D/host_key
PidFile $D/sshd.pid
AuthorizedKeysFile $D/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
CONF
"$SSHD" -f "$D/sshd_config" -E "$D/sshd.log" || { echo "FAIL: sshd did not start"; exit 1; }
for _ in $(seq 50); do [ -f "$D/sshd.pid" ] && break; sleep 0.1; done
export HOME_LOCAL="$D/home"; mkdir -p "$HOME_LOCAL"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }

# What a job's cluster leaves: node processes of hvactor-run clusters, their
# directories on the "machines" (this host's home of the ssh user) and the
# CA here. Only this test's: what an earlier run on this machine left (a
# killed test) is not counted again.
cluster_dirs() {
  ls -d "$REMOTE_HOME"/.hvactor/nodes/hvactor-run-* "$HOME_LOCAL"/.hvactor/up/hvactor-run-* 2>/dev/null
}
before_dirs=$(cluster_dirs)
before_procs=$(pgrep -f -- "hvactor-node.*--node-id (localhost|127\.0\.0\.1)( |$)")
leftovers() {
  local procs files
  procs=$(pgrep -f -- "hvactor-node.*--node-id (localhost|127\.0\.0\.1)( |$)" \
          | grep -vxF -e "${before_procs:-none}" | tr '\n' ' ')
  files=$(cluster_dirs | grep -vxF -e "${before_dirs:-none}" | tr '\n' ' ')
  echo "$procs$files"
}

# 1. -H with two "machines" (two names of this host), 2 slots each
HOME=$HOME_LOCAL timeout 120 "$RUN" -H localhost:2,127.0.0.1:2 -p "$SSH_PORT" -i "$D/id" \
  -- "$PROG" where > "$D/1.out" 2>&1; rc=$?
sed 's/^/  | /' "$D/1.out" | tail -20
sleep 0.5
left=$(leftovers)
if [ "$rc" = 0 ] && [ "$(grep -c 'sum 4' "$D/1.out")" = 4 ] \
   && [ "$(grep -c 'where rank=[0-9] host=localhost ' "$D/1.out")" = 2 ] \
   && [ "$(grep -c 'where rank=[0-9] host=127.0.0.1 ' "$D/1.out")" = 2 ] && [ -z "$left" ]; then
  ok "1: -H localhost:2,127.0.0.1:2 ran 4 ranks, 2 per node, nothing left"
else fail "1: exit $rc, left '$left'"; fi

# 2. --hostfile, fewer ranks than slots
printf '# two machines\nlocalhost slots=1\n127.0.0.1 slots=2  # the second\n\n' > "$D/hosts"
HOME=$HOME_LOCAL timeout 120 "$RUN" --hostfile "$D/hosts" -np 3 -p "$SSH_PORT" -i "$D/id" \
  -- "$PROG" where > "$D/2.out" 2>&1; rc=$?
sleep 0.5
left=$(leftovers)
if [ "$rc" = 0 ] && [ "$(grep -c 'sum 3' "$D/2.out")" = 3 ] \
   && [ "$(grep -c 'where rank=0 host=localhost ' "$D/2.out")" = 1 ] && [ -z "$left" ]; then
  ok "2: --hostfile ran 3 ranks (1 on localhost, 2 on 127.0.0.1), nothing left"
else fail "2: exit $rc, left '$left': $(tail -5 "$D/2.out")"; fi

# 3. a host that cannot be reached
HOME=$HOME_LOCAL timeout 120 "$RUN" -H localhost:1,no-such-host.invalid:1 -p "$SSH_PORT" \
  -i "$D/id" --start-timeout 10 -- "$PROG" ranks > "$D/3.out" 2>&1; rc=$?
sleep 0.5
left=$(leftovers)
if [ "$rc" = 1 ] && grep -q "no-such-host.invalid" "$D/3.out" \
   && grep -q "did not all come up" "$D/3.out" && [ -z "$left" ]; then
  ok "3: the unreachable host is named, exit 1, nothing left"
else fail "3: exit $rc, left '$left': $(cat "$D/3.out")"; fi

# 4. SIGTERM mid-job
HOME=$HOME_LOCAL "$RUN" -H localhost:1,127.0.0.1:1 -p "$SSH_PORT" -i "$D/id" \
  -- "$PROG" sleep > "$D/4.out" 2>&1 &
run_pid=$!
for _ in $(seq 300); do [ "$(grep -c '^\[.*pid ' "$D/4.out")" = 2 ] && break; sleep 0.1; done
kill -TERM "$run_pid"; wait "$run_pid"; rc=$?
sleep 0.5
left=$(leftovers)
sleepers=$(pgrep -f -- "$PROG sleep" | tr '\n' ' ')
if [ "$rc" = 143 ] && [ -z "$left" ] && [ -z "$sleepers" ]; then
  ok "4: SIGTERM stopped the ranks and the nodes, nothing left"
else fail "4: exit $rc, left '$left', ranks '$sleepers': $(tail -5 "$D/4.out")"; fi

echo "$failures failure(s)"
[ "$failures" = 0 ]
