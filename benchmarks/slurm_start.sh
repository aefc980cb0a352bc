#!/usr/bin/env bash
# slurm_start.sh BUILD_DIR [REPEATS]: how long a whole 3-rank job takes under
# salloc on an emulated 3-node Slurm cluster (tests/slurm/slurm-up.sh), for
# hvactor-run (cluster bring-up, ranks, tear-down) against Open MPI's mpirun
# in the same allocation shape (it starts its daemons with srun) and the
# floor, `srun true`. Interleaved, median of REPEATS (default 7). Root only.
set -uo pipefail
B=$(realpath "${1:?build dir}"); R=${2:-7}
HERE=$(cd "$(dirname "$0")" && pwd)
D=$(mktemp -d /tmp/hvactor-slurm-bench.XXXXXX)
trap '"$HERE/../tests/slurm/slurm-down.sh" "$D"; rm -rf "$D"' EXIT
SLURM_TEST_CTLD_PORT=$((20000 + RANDOM % 5000)) SLURM_TEST_SLURMD_PORT=$((30000 + RANDOM % 5000)) \
  "$HERE/../tests/slurm/slurm-up.sh" "$D" 3 2 >/dev/null || exit 1
export SLURM_CONF=$D/slurm.conf
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,tcp \
  OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
time_of() { local s e; s=$(date +%s%N); "$@" >/dev/null 2>&1 || echo "FAILED: $*" >&2; e=$(date +%s%N); echo $(( (e - s) / 1000000 )); }
declare -A all
for _ in $(seq "$R"); do
  all[hvactor]+="$(time_of salloc -N3 --ntasks-per-node=1 "$B/tools/hvactor-run" -- "$B/tests/integration/run_program" ranks) "
  all[mpirun]+="$(time_of salloc -N3 --ntasks-per-node=1 mpirun -np 3 "$B/tools/hvactor-bench-mpi" --kind allreduce --bytes 4 --iters 1 --warmup 0) "
  all[srun]+="$(time_of salloc -N3 --ntasks-per-node=1 srun true) "
done
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "| salloc -N3 --ntasks-per-node=1 ... | median ms | all runs ms |"
echo "|---|---|---|"
echo "| hvactor-run -- run_program (hvd::init, allreduce) | $(echo "${all[hvactor]}" | median) | ${all[hvactor]}|"
echo "| mpirun -np 3 hvactor-bench-mpi (MPI_Init, allreduce) | $(echo "${all[mpirun]}" | median) | ${all[mpirun]}|"
echo "| srun true (the floor) | $(echo "${all[srun]}" | median) | ${all[srun]}|"
