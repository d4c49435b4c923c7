# syntax=docker/dockerfile:1
# rollgate: one static binary (controller and node agent) in a distroless, non-root image.
#
#   docker build -t <registry>/rollgate:<tag> .
#
# hack/musl-check.sh runs the builder stage's cargo command outside a container and
# checks the result is static and runs; `make test` runs it.

FROM rust:1.95-bookworm AS builder
# ring compiles C for the target: musl-tools provides musl-gcc. Not version-pinned:
# Debian stable only ships security fixes, and a pin would break on the next one.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends musl-tools \
    && rm -rf /var/lib/apt/lists/* \
    && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY crates ./crates
COPY benches ./benches
RUN cargo build --release --locked --target x86_64-unknown-linux-musl --bin rollgate \
    && install -D -m 0755 target/x86_64-unknown-linux-musl/release/rollgate /out/rollgate

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=builder /out/rollgate /usr/local/bin/rollgate
# 65532 is distroless's "nonroot"; numeric so runAsNonRoot can verify it.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/rollgate"]
