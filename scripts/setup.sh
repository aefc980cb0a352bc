#!/usr/bin/env bash
# setup.sh: install the system packages hvactor needs to build and test
# (Debian 12). Idempotent: packages already installed are left alone and
# apt-get update runs only when something is missing.
#
# libtorch-dev (LibTorch, for hvactor::torch and the quickstart example) is
# installed too; HVACTOR_WITH_TORCH=0 leaves it out. --build-only installs
# only what the libraries and the examples need (scripts/example.sh); the
# tests, benchmarks, tools and docs need the rest.
#
#   HVACTOR_WITH_TORCH=0 scripts/setup.sh    without libtorch-dev
#   scripts/setup.sh --build-only            libraries and examples only
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive

build_only=0
for arg in "$@"; do
  case "$arg" in
    --build-only) build_only=1 ;;
    *) echo "setup.sh: unknown argument '$arg' (--build-only)" >&2; exit 2 ;;
  esac
done

# The libraries (base, collectives, actors, driver, train) and examples.
packages=(
  build-essential
  cmake
  # scripts/example.sh builds with Ninja: compiling goes on while a library
  # links or LibTorch's header is precompiled (Make waits for each target).
  ninja-build
  libcaf-dev
  libgloo-dev
  libfmt-dev
  libcxxopts-dev
  libssl-dev
  pkg-config
  # Autotune's Gaussian process (collectives/tuning/bayesian_optimization.cpp).
  libeigen3-dev
  # hvactor::train's TensorBoard event files: protobuf messages, CRC-32C.
  libprotobuf-dev
  protobuf-compiler
  libisal-dev
)
# The tools, tests, benchmarks and docs.
test_packages=(
  doctest-dev
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
  openssh-client
  openssh-server
  # deploy/kubernetes' checks: the manifests' command lines on loopback
  # (python3-yaml) and their style (yamllint).
  python3-yaml
  yamllint
  # hvactor-bench --plot.
  gnuplot-nox
  # benchmarks/train_link.sh: the emulated link's own rate, next to
  # hvactor::train's transfers (debconf's default: no daemon).
  iperf3
  # hvactor-node's dashboard and /metrics (the head's HTTP server); the
  # dashboard test loads the page in headless Chromium.
  libcpp-httplib-dev
  chromium
  # The documentation site (mkdocs.yml; `mkdocs build --strict` is a test).
  mkdocs
  python3-pymdownx
  # hvactor-bench's PyTorch peer (torch.distributed).
  python3-torch
  # The Python package (hvactor.torch, python/): its extension is built
  # with pybind11 against Debian's python3-torch; its tests run pytest.
  pybind11-dev
  python3-dev
  python3-pytest
  # hvactor.Executor pickles functions by value (lambdas, __main__'s), as
  # horovod.ray does.
  python3-cloudpickle
)
if [[ "$build_only" == 0 ]]; then
  packages+=("${test_packages[@]}")
fi
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
