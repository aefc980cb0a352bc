#!/usr/bin/env bash
# hvactor_up_test.sh BUILD_DIR: hvactor-up / hvactor-down / --status against a
# real sshd on 127.0.0.1 (a throwaway host key and user key, its own port),
# three "machines" on this host with distinct node ids. Skips (77) without
# root or without sshd/ssh.
#   1. up: setup commands ran on every machine, all 3 nodes joined, the
#      printed command runs a job with the cluster's TLS identity
#   2. --status lists the three nodes
#   3. down stops every node; nothing left
#   4. a worker that cannot be reached is named; the others come up and run
#      a job; down stops them and reports the unreachable one
#   5. a typo in the cluster file is an error naming the key
#   6. a directory, a duplicate key, an oversized file: exit 2 naming them
set -uo pipefail
B=$(realpath "${1:?build dir}")
UP="$B/tools/hvactor-up"; DOWN="$B/tools/hvactor-down"; RUN="$B/tools/hvactor-run"
NODE="$B/tools/hvactor-node"; PROG="$B/tests/integration/run_program"
SSHD=$(command -v sshd || echo /usr/sbin/sshd)
if [ "$(id -u)" != 0 ] || [ ! -x "$SSHD" ] || ! command -v ssh >/dev/null; then
  echo "SKIP: needs root, sshd and ssh (scripts/setup.sh installs openssh-server)"; exit 77
fi
D=$(mktemp -d /tmp/hvactor-up.XXXXXX); chmod 755 "$D"
NAME="uptest-$$"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
SSH_PORT=$(free_port); HEAD_PORT=$(free_port); CLOSED_PORT=$(free_port)
cleanup() {
  [ -f "$D/sshd.pid" ] && kill "$(cat "$D/sshd.pid")" 2>/dev/null
  pkill -f -- "--node-id up-$$-" 2>/dev/null
  rm -rf "$D" "$HOME/.hvactor/nodes/$NAME"
}
trap cleanup EXIT
ssh-keygen -q -t ed25519 -N '' -f "$D/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$D/id"
cp "$D/id.pub" "$D/authorized_keys"
mkdir -p /run/sshd
cat > "$D/sshd_config" <<EOF
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
EOF
"$SSHD" -f "$D/sshd_config" -E "$D/sshd.log" || { echo "FAIL: sshd did not start"; exit 1; }
for _ in $(seq 50); do [ -f "$D/sshd.pid" ] && break; sleep 0.1; done
export HOME_LOCAL="$D/home"; mkdir -p "$HOME_LOCAL"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }

write_cluster() { # $1: file, $2: extra worker entries
  cat > "$1" <<EOF
cluster_name: $NAME
provider:
  type: local
  head_ip: {ip: 127.0.0.1, node_id: up-$$-head, num_cpus: 2}
  worker_ips:
    - {ip: 127.0.0.1, node_id: up-$$-w1, num_cpus: 2}
$2
auth:
  ssh_user: $(id -un)
  ssh_private_key: $D/id
  ssh_port: $SSH_PORT
setup_commands:
  - echo ran >> $D/setup.log
hvactor:
  port: $HEAD_PORT
  node_binary: $NODE
  timeout: 20
EOF
}

# 1. up
write_cluster "$D/c.yaml" "    - {ip: 127.0.0.1, node_id: up-$$-w2, num_cpus: 1}"
HOME=$HOME_LOCAL "$UP" "$D/c.yaml" > "$D/1.out" 2>&1; rc=$?
cat "$D/1.out" | sed 's/^/  | /'
tls="--tls-cert $HOME_LOCAL/.hvactor/up/$NAME/driver.pem --tls-key $HOME_LOCAL/.hvactor/up/$NAME/driver.key --tls-ca $HOME_LOCAL/.hvactor/up/$NAME/ca.pem"
if [ "$rc" = 0 ] && grep -q "all 3 nodes joined" "$D/1.out" && [ "$(grep -c ran "$D/setup.log")" = 3 ] \
   && grep -q -- "hvactor-run --address 127.0.0.1:$HEAD_PORT $tls" "$D/1.out"; then
  ok "1: up: setup on 3 machines, 3 nodes joined"
else fail "1: exit $rc"; fi
timeout 60 "$RUN" --address "127.0.0.1:$HEAD_PORT" $tls -np 3 -- "$PROG" ranks > "$D/job.out" 2>&1
[ "$(grep -c 'sum 3' "$D/job.out")" = 3 ] && ok "1: a 3-rank job over the printed command" || fail "1: job: $(tail -3 "$D/job.out")"
# Without the cluster's certificate the head refuses.
if timeout 30 "$RUN" --address "127.0.0.1:$HEAD_PORT" --timeout 5 -np 1 -- "$PROG" ranks > "$D/notls.out" 2>&1; then
  fail "1: a driver without the cluster's certificate ran a job"
else ok "1: a driver without the certificate is refused"; fi

# 2. status
HOME=$HOME_LOCAL "$UP" --status "$D/c.yaml" > "$D/2.out" 2>&1
if grep -q "up-$$-head" "$D/2.out" && grep -q "up-$$-w1" "$D/2.out" && grep -q "up-$$-w2" "$D/2.out" && grep -q "^3 nodes" "$D/2.out"; then
  ok "2: --status lists the 3 nodes"
else fail "2: $(cat "$D/2.out")"; fi

# 3. down
HOME=$HOME_LOCAL "$DOWN" "$D/c.yaml" > "$D/3.out" 2>&1; rc=$?
sleep 0.5
left=$(pgrep -f -- "--node-id up-$$-" | tr '\n' ' ')
if [ "$rc" = 0 ] && [ "$(grep -c ': stopped' "$D/3.out")" = 3 ] && [ -z "$left" ]; then ok "3: down stopped 3 nodes, none left"
else fail "3: exit $rc, left '$left': $(cat "$D/3.out")"; fi

# 4. an unreachable worker
write_cluster "$D/u.yaml" "    - {ip: 127.0.0.1, node_id: up-$$-w3, ssh_port: $CLOSED_PORT}"
HOME=$HOME_LOCAL "$UP" "$D/u.yaml" > "$D/4.out" 2>&1; rc=$?
cat "$D/4.out" | sed 's/^/  | /'
if [ "$rc" = 1 ] && grep -q "up-$$-w3 (127.0.0.1:$CLOSED_PORT): cannot reach it over ssh" "$D/4.out" \
   && grep -q "2 of 3 nodes up" "$D/4.out"; then ok "4: the unreachable worker is named, 2 of 3 up"
else fail "4: exit $rc"; fi
timeout 60 "$RUN" --address "127.0.0.1:$HEAD_PORT" $tls -np 2 -- "$PROG" ranks > "$D/job4.out" 2>&1
[ "$(grep -c 'sum 2' "$D/job4.out")" = 2 ] && ok "4: the others run a job" || fail "4: job: $(tail -3 "$D/job4.out")"
HOME=$HOME_LOCAL "$DOWN" "$D/u.yaml" > "$D/4d.out" 2>&1; rc=$?
sleep 0.5
left=$(pgrep -f -- "--node-id up-$$-" | tr '\n' ' ')
if [ "$rc" = 1 ] && grep -q "up-$$-w3 (127.0.0.1:$CLOSED_PORT): unreachable" "$D/4d.out" && [ -z "$left" ]; then
  ok "4: down stops the others and names the unreachable one"
else fail "4: down exit $rc, left '$left': $(cat "$D/4d.out")"; fi

# 5. a typo
sed 's/ssh_user:/ssh_usr:/' "$D/c.yaml" > "$D/typo.yaml"
HOME=$HOME_LOCAL "$UP" "$D/typo.yaml" > "$D/5.out" 2>&1; rc=$?
if [ "$rc" = 2 ] && grep -q "auth.ssh_usr: unknown key" "$D/5.out"; then ok "5: $(cat "$D/5.out")"
else fail "5: exit $rc: $(cat "$D/5.out")"; fi

# 6. a directory, a duplicate key (top level and nested), garbage: exit 2
#    naming the file, the key and both lines; nothing started
mkdir -p "$D/dir.yaml"
HOME=$HOME_LOCAL "$UP" "$D/dir.yaml" > "$D/6a.out" 2>&1; rc=$?
if [ "$rc" = 2 ] && grep -q "$D/dir.yaml: cannot read the cluster file: it is a directory" "$D/6a.out"
then ok "6a: $(cat "$D/6a.out")"; else fail "6a: exit $rc: $(cat "$D/6a.out")"; fi
{ cat "$D/c.yaml"; echo "cluster_name: other"; } > "$D/dup.yaml"
line=$(grep -c '' "$D/dup.yaml")
HOME=$HOME_LOCAL "$UP" "$D/dup.yaml" > "$D/6b.out" 2>&1; rc=$?
if [ "$rc" = 2 ] && grep -q "$D/dup.yaml: cluster_name: the key appears twice, on lines 1 and $line" "$D/6b.out"
then ok "6b: $(cat "$D/6b.out")"; else fail "6b: exit $rc: $(cat "$D/6b.out")"; fi
sed 's/^  ssh_port:.*/&\n  ssh_user: mallory/' "$D/c.yaml" > "$D/dup2.yaml"
HOME=$HOME_LOCAL "$UP" "$D/dup2.yaml" > "$D/6c.out" 2>&1; rc=$?
if [ "$rc" = 2 ] && grep -q "auth.ssh_user: the key appears twice, on lines" "$D/6c.out"
then ok "6c: $(cat "$D/6c.out")"; else fail "6c: exit $rc: $(cat "$D/6c.out")"; fi
sed "s|^  ssh_user:.*|  ssh_user: '-oProxyCommand=touch $D/pwned'|" "$D/c.yaml" > "$D/user.yaml"
HOME=$HOME_LOCAL "$UP" "$D/user.yaml" > "$D/6e.out" 2>&1; rc=$?
if [ "$rc" = 2 ] && grep -q "auth.ssh_user: '-oProxyCommand=touch .*' is not a user name" "$D/6e.out" && [ ! -e "$D/pwned" ]
then ok "6e: $(cat "$D/6e.out")"; else fail "6e: exit $rc, pwned: $(ls "$D/pwned" 2>&1): $(cat "$D/6e.out")"; fi
head -c 3000000 /dev/zero | tr '\0' 'a' > "$D/big.yaml"
HOME=$HOME_LOCAL "$UP" "$D/big.yaml" > "$D/6d.out" 2>&1; rc=$?
if [ "$rc" = 2 ] && grep -q "larger than 1048576 bytes" "$D/6d.out"
then ok "6d: $(cat "$D/6d.out")"; else fail "6d: exit $rc: $(cat "$D/6d.out")"; fi

echo "hvactor_up_test: $failures failure(s)"
[ "$failures" = 0 ]
