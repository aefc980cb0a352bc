#!/usr/bin/env bash
# setup.sh: install the system packages hvactor needs to build and test
# (Debian 12). Idempotent: packages already installed are left alone and
# apt-get update runs only when something is missing.
#
# libtorch-dev (LibTorch, for hvactor::torch and the quickstart example) is
# installed too; HVACTOR_WITH_TORCH=0 leaves it out.
#
#   HVACTOR_WITH_TORCH=0 scripts/setup.sh    without libtorch-dev
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive

packages=(
  build-essential
  cmake
  libcaf-dev
  libgloo-dev
  libfmt-dev
  libcxxopts-dev
  doctest-dev
  libssl-dev
  pkg-config
  procps
  # scripts/check_layers.py (the `layering` test: includes run one way).
  python3
  # docs/architecture.svg from docs/architecture.dot (the `architecture`
  # test renders it again and compares).
  graphviz
  # The Open MPI peer of benchmarks/allreduce (optional in CMake).
  libopenmpi-dev
  openmpi-bin
  # hvactor-run inside Slurm allocations; the tests start an emulated
  # 3-node Slurm cluster on this machine (tests/slurm/).
  slurmctld
  slurmd
  slurm-client
  munge
  # hvactor-up: its cluster file (YAML), and ssh; the tests run a real sshd
  # on 127.0.0.1.
  libyaml-cpp-dev
  # Autotune's Gaussian process (collectives/bayesian_optimization.cpp).
  libeigen3-dev
  openssh-client
  openssh-server
  # deploy/kubernetes' checks: the manifests' command lines on loopback
  # (python3-yaml) and their style (yamllint).
  python3-yaml
  yamllint
  # hvactor-bench --plot.
  gnuplot-nox
  # hvactor::train's TensorBoard event files: protobuf messages, CRC-32C.
  libprotobuf-dev
  protobuf-compiler
  libisal-dev
  # benchmarks/train_link.sh: the emulated link's own rate, next to
  # hvactor::train's transfers (debconf's default: no daemon).
  iperf3
  python3-torch
)
if [[ "${HVACTOR_WITH_TORCH:-1}" != "0" ]]; then
  packages+=(libtorch-dev)
fi

missing=()
for pkg in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  if [[ "$status" != "install ok installed" ]]; then
    missing+=("$pkg")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup.sh: all packages present"
  exit 0
fi

if [[ $(id -u) -eq 0 ]]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo --preserve-env=DEBIAN_FRONTEND)
else
  echo "setup.sh: missing packages (${missing[*]}) and not root, no sudo" >&2
  exit 1
fi

echo "setup.sh: installing ${missing[*]}"
"${as_root[@]}" apt-get update
"${as_root[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
