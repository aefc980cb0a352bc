# The hvactor image for deploy/kubernetes: Debian 12 and the project's own
# packages (scripts/setup.sh), built and installed the way CI builds it.
#   docker build -t hvactor .
# tests/kubernetes/dockerfile_check.sh runs these steps' build commands
# without docker.
FROM debian:bookworm AS build
ENV DEBIAN_FRONTEND=noninteractive HVACTOR_WITH_TORCH=0
WORKDIR /src
COPY . /src
RUN bash scripts/setup.sh
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release \
 && cmake --build /build -j "$(nproc)" \
 && cmake --install /build --prefix /usr/local \
 && install -D -m 0755 /build/examples/spmd_train /usr/local/libexec/hvactor/spmd_train

FROM debian:bookworm
ENV DEBIAN_FRONTEND=noninteractive HVACTOR_WITH_TORCH=0
# The same packages (the libraries the binaries link against come with
# them); then only the installed tree of the build stage.
COPY scripts/setup.sh /tmp/setup.sh
RUN bash /tmp/setup.sh && rm /tmp/setup.sh && rm -rf /var/lib/apt/lists/*
COPY --from=build /usr/local /usr/local
RUN ldconfig && hvactor-node --help > /dev/null && hvactor-run --help > /dev/null
ENTRYPOINT []
CMD ["hvactor-node", "--help"]
