#!/usr/bin/env bash
# Proves the container image's build works without a container engine: the static
# musl release build that the Dockerfile's builder stage runs, then the binary itself.
#
#   bash hack/musl-check.sh
#
# The target dir is cached outside the clone (${ROLLGATE_CACHE_DIR:-~/.cache/rollgate}/
# musl-target) so CI and later runs reuse it; a cold build compiles the whole
# dependency tree once more for the musl target.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target=x86_64-unknown-linux-musl
cache_dir="${ROLLGATE_CACHE_DIR:-${HOME}/.cache/rollgate}"
export CARGO_TARGET_DIR="${cache_dir}/musl-target"

if ! rustup target list --installed 2>/dev/null | grep -qx "${target}"; then
  echo "musl-check: installing the ${target} target (rustup target add)" >&2
  if ! rustup target add "${target}" >&2; then
    echo "musl-check: 'rustup target add ${target}' failed; the static build cannot be checked here" >&2
    exit 1
  fi
fi

# ring compiles C for the target and needs musl's gcc wrapper (Debian: musl-tools), as
# in the Dockerfile's builder stage.
if ! command -v musl-gcc >/dev/null 2>&1; then
  if [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "musl-check: installing musl-tools (musl-gcc) with apt-get" >&2
    apt-get install -y --no-install-recommends musl-tools >&2 \
      || { apt-get update >&2 && apt-get install -y --no-install-recommends musl-tools >&2; }
  fi
  if ! command -v musl-gcc >/dev/null 2>&1; then
    echo "musl-check: musl-gcc not found; install musl-tools (Debian/Ubuntu) or musl-gcc" >&2
    exit 1
  fi
fi
export CC_x86_64_unknown_linux_musl="${CC_x86_64_unknown_linux_musl:-musl-gcc}"

started=$(date +%s)
(cd "${repo_root}" && cargo build --quiet --release --locked --target "${target}" --bin rollgate)
echo "musl-check: cargo build --release --target ${target} took $(($(date +%s) - started))s" >&2

binary="${CARGO_TARGET_DIR}/${target}/release/rollgate"
# `file` names a static executable "statically linked" (or "static-pie linked");
# where `file` is missing, ldd's answer for a static binary is the fallback.
if command -v file >/dev/null 2>&1; then
  description="$(file -L "${binary}")"
  if ! grep -Eq 'statically linked|static-pie linked' <<<"${description}"; then
    echo "musl-check: ${binary} is not static: ${description}" >&2
    exit 1
  fi
else
  ldd_out="$(ldd "${binary}" 2>&1 || true)"
  if ! grep -Eq 'not a dynamic executable|statically linked' <<<"${ldd_out}"; then
    echo "musl-check: ${binary} is not static: ${ldd_out}" >&2
    exit 1
  fi
fi

help="$("${binary}" --help)"
for subcommand in controller agent; do
  if ! grep -q "${subcommand}" <<<"${help}"; then
    echo "musl-check: 'rollgate --help' of the musl build does not list '${subcommand}':" >&2
    echo "${help}" >&2
    exit 1
  fi
done
echo "musl-check: ok: ${binary} is static and runs" >&2
