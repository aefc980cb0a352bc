# The hvactor image that deploy/kubernetes runs: Debian 12, the project's own
# packages (scripts/setup.sh), a Release build installed under /usr/local.
#   docker build -t hvactor:0.1.0 .
#   docker build --build-arg HVACTOR_WITH_TORCH=0 -t hvactor:0.1.0 .   # no LibTorch
# No CUDA: Debian 12's main archive has no CUDA toolkit or NCCL, so nodes of
# this image offer no GPU (deploy/kubernetes-gpu needs a CUDA build).
# tests/kubernetes/dockerfile_check.sh checks this file without docker.

FROM debian:bookworm AS build
# setup.sh installs LibTorch unless this is 0; the driver Job's example
# program (spmd_train) is built only with it.
ARG HVACTOR_WITH_TORCH=1
# setup.sh alone first, so that a source change does not redo apt.
COPY scripts/setup.sh /src/scripts/setup.sh
RUN bash /src/scripts/setup.sh
COPY . /src
WORKDIR /src
# scripts/build.sh's configure and build, in Release, without tests and
# benchmarks (not in the image).
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release \
      -DHVACTOR_BUILD_TESTS=OFF -DHVACTOR_BUILD_BENCHMARKS=OFF \
 && cmake --build /build -j "$(nproc)" \
 && cmake --install /build --prefix /usr/local \
 && mkdir -p /usr/local/libexec/hvactor \
 && find /build/examples -maxdepth 1 -type f -perm -u+x \
      -exec install -m 0755 -t /usr/local/libexec/hvactor {} +

FROM debian:bookworm
ARG HVACTOR_WITH_TORCH=1
# The same packages again: the libraries hvactor links against, and what a
# program built against hvactor (which drivers ship to the nodes) needs.
COPY scripts/setup.sh /tmp/setup.sh
RUN bash /tmp/setup.sh && rm /tmp/setup.sh && rm -rf /var/lib/apt/lists/*
COPY --from=build /usr/local /usr/local
# Fails the build if a library is missing.
RUN ldconfig && hvactor-node --help > /dev/null && hvactor-run --help > /dev/null
CMD ["hvactor-node", "--help"]
