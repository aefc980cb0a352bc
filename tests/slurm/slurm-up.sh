#!/usr/bin/env bash
# slurm-up.sh DIR [NODES] [CPUS_PER_NODE]: an emulated Slurm cluster on this
# host (docs/development/platform-notes.md, "Slurm: an emulated cluster on
# one host"): munged, slurmctld and NODES slurmd (fake nodes
# n1..nN, one slurmd each on its own port), every file under DIR.
# SLURM_TEST_GPUS=G adds G fake GPUs per node; SLURM_TEST_CTLD_PORT and
# SLURM_TEST_SLURMD_PORT move the ports. Then: export SLURM_CONF=DIR/slurm.conf;
# stop with slurm-down.sh DIR (it kills exactly the pids in DIR/run/pids).
set -euo pipefail
D=$(realpath -m "${1:?dir}"); N=${2:-1}; C=${3:-2}
mkdir -p "$D"/{spool,state,log,run}; chmod 755 "$D"
dd if=/dev/urandom of="$D/munge.key" bs=1 count=1024 status=none; chmod 600 "$D/munge.key"
# Every daemon in the foreground, backgrounded here: $! is its pid.
munged -F --force --key-file="$D/munge.key" --socket="$D/run/munge.sock" \
  --pid-file="$D/run/munged.pid" --log-file="$D/log/munged.log" \
  --seed-file="$D/run/munged.seed" </dev/null >>"$D/log/munged.out" 2>&1 &
echo $! > "$D/run/pids"
for _ in $(seq 50); do [ -S "$D/run/munge.sock" ] && break; sleep 0.1; done
H=$(hostname -s); CTLD_PORT=${SLURM_TEST_CTLD_PORT:-6817}; BASE_PORT=${SLURM_TEST_SLURMD_PORT:-17000}
{
cat <<EOF
ClusterName=hvtest
SlurmctldHost=$H(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$D/run/munge.sock
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool/%n
SlurmctldPidFile=$D/run/slurmctld.pid
SlurmdPidFile=$D/run/slurmd-%n.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
InactiveLimit=0
KillWait=5
MinJobAge=60
CommunicationParameters=NoInAddrAny
EOF
G=${SLURM_TEST_GPUS:-0}; GRES=""
if [ "$G" -gt 0 ]; then # fake GPUs: character devices (major 195) that nothing opens
  echo "GresTypes=gpu"; GRES=" Gres=gpu:$G"
  mkdir -p "$D/dev"; for g in $(seq 0 $((G - 1))); do mknod "$D/dev/nvidia$g" c 195 "$g"; done
  { echo "AutoDetect=off"; echo "Name=gpu File=$D/dev/nvidia[0-$((G - 1))]"; } > "$D/gres.conf"
fi
for i in $(seq 1 "$N"); do
  echo "NodeName=n$i NodeHostname=$H NodeAddr=127.0.0.1 Port=$((BASE_PORT + i)) CPUs=$C RealMemory=1000$GRES State=UNKNOWN"
done
echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
} > "$D/slurm.conf"
export SLURM_CONF=$D/slurm.conf
slurmctld -D -i -f "$D/slurm.conf" </dev/null >>"$D/log/slurmctld.out" 2>&1 &
echo $! >> "$D/run/pids"
start_slurmd() { # node index; its pid goes to run/pids and run/slurmd-n$1.pid.sh
  mkdir -p "$D/spool/n$1"
  slurmd -D -N "n$1" -f "$D/slurm.conf" </dev/null >>"$D/log/slurmd-n$1.out" 2>&1 &
  echo $! >> "$D/run/pids"; echo $! > "$D/run/slurmd-n$1.sh-pid"
}
for i in $(seq 1 "$N"); do start_slurmd "$i"; done
idle_nodes() { sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u; }
# Ready in 0.1-1.3 s here; CI once saw a node stay out for 30 s. After 10 s
# a slurmd that died is started again and a node still down or unknown is
# resumed, once; after 60 s the script fails with every node's state.
idle=0; nudged=0
for t in $(seq 600); do
  idle=$(idle_nodes | wc -l); [ "$idle" -ge "$N" ] && break
  if [ "$t" = 100 ]; then
    nudged=1
    for i in $(seq 1 "$N"); do
      idle_nodes | grep -qx "n$i" && continue
      if ! kill -0 "$(cat "$D/run/slurmd-n$i.sh-pid")" 2>/dev/null; then
        echo "slurm-up: slurmd of n$i died; starting it again"; start_slurmd "$i"
      else
        echo "slurm-up: n$i is $(sinfo -h -n "n$i" -N -o '%T (%E)' 2>/dev/null) after 10 s; resuming it"
        scontrol update nodename="n$i" state=resume 2>&1 | sed 's/^/  /'
      fi
    done
  fi
  sleep 0.1
done
if [ "$idle" -lt "$N" ]; then
  echo "slurm-up: only $idle of $N nodes idle after 60 s (nudged: $nudged); their states:"
  sinfo -N -o '%N %T %E' 2>&1 | sed 's/^/  /'
  tail -n 8 "$D"/log/*.log "$D"/log/*.out 2>&1 | sed 's/^/  /'
  exit 1
fi
