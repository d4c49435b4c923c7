#!/usr/bin/env bash
# Starts the emulator on a free loopback port, runs check.py (official Python SDKs)
# against it, and stops the emulator it started.
#
#   bash crates/lb-emulator/sdk-check/run.sh            # builds lb-emulator with cargo
#   LB_EMULATOR_BIN=path/to/lb-emulator bash .../run.sh  # uses a built binary
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "${here}/../../.." && pwd)"
python="$(bash "${repo_root}/hack/cloud-sdk-venv.sh")"

# The committed signature vectors must still be what the pinned SDK computes.
"${python}" "${repo_root}/crates/alibaba-lb/sdk-vectors/generate.py" --check

binary="${LB_EMULATOR_BIN:-}"
if [[ -z "${binary}" ]]; then
  (cd "${repo_root}" && cargo build --quiet -p lb-emulator)
  binary="${CARGO_TARGET_DIR:-${repo_root}/target}/debug/lb-emulator"
fi

work="$(mktemp -d)"
emulator_pid=""
cleanup() {
  if [[ -n "${emulator_pid}" ]] && kill -0 "${emulator_pid}" 2>/dev/null; then
    kill -TERM "${emulator_pid}"
    wait "${emulator_pid}" 2>/dev/null || true
  fi
  rm -rf "${work}"
}
trap cleanup EXIT

"${binary}" --listen 127.0.0.1:0 --registration-delay-ms 100 --health-delay-ms 200 --job-delay-ms 100 \
  >"${work}/address" 2>"${work}/emulator.log" &
emulator_pid=$!

for _ in $(seq 1 100); do
  [[ -s "${work}/address" ]] && break
  if ! kill -0 "${emulator_pid}" 2>/dev/null; then
    echo "sdk-check: emulator exited early:" >&2
    cat "${work}/emulator.log" >&2
    exit 1
  fi
  sleep 0.1
done
address="$(head -n1 "${work}/address")"
if [[ -z "${address}" ]]; then
  echo "sdk-check: emulator did not report its address" >&2
  exit 1
fi

status=0
"${python}" "${here}/check.py" --endpoint "${address}" || status=$?

if ! grep -q "rejected request" "${work}/emulator.log"; then
  echo "sdk-check: emulator log lacks the rejected-signature line" >&2
  status=1
fi
if [[ "${status}" -ne 0 ]]; then
  echo "--- emulator log (tail) ---" >&2
  tail -n 40 "${work}/emulator.log" >&2
fi
exit "${status}"
