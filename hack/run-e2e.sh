#!/usr/bin/env bash
# Runs e2e test files of the rollgate package, E2E_JOBS (2) files at a time, against the
# control plane in ROLLGATE_TEST_KUBECONFIG.
#
#   hack/run-e2e.sh NAME...     (the files tests/NAME.rs)
#
# Why at once: an e2e file spends most of its time waiting for simulated pods to stop
# and start, so one file at a time left the 2 cores idle for most of `make test`. Every
# test makes its own nodes and namespace (tests/support/mod.rs), so files share the
# control plane as the tests of one file already do (RUST_TEST_THREADS each).
#
# Each file's output is printed whole when it ends, with how long it took; the run
# fails, after every file has run, when any of them failed, and names them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
cd "$repo"

jobs=${E2E_JOBS:-2}
# The longest files first (their times in `make test` on 2 cores), so the run does not
# end with one long file alone; files not named here follow in name order.
longest_first=(gates_inject daemonset_rolling gates_walk_through daemonset_failure
  daemonset_behind_lb gates_annotations testbed daemonset_waves)

test_args=()
for name in "$@"; do test_args+=(--test "$name"); done

# Build every file once (compiler messages on stderr as usual); cargo names each test
# binary in its JSON messages on stdout.
mapfile -t built < <(
  cargo test -p rollgate --locked "${test_args[@]}" --no-run --message-format=json-render-diagnostics |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "test" in m["target"]["kind"]:
        print(m["target"]["name"], m["executable"])
'
)
declare -A exe_of=()
for entry in "${built[@]}"; do exe_of[${entry%% *}]=${entry#* }; done
for name in "$@"; do
  [ -n "${exe_of[$name]:-}" ] || { echo "[e2e] cargo built no test binary for tests/$name.rs" >&2; exit 1; }
done

order=()
for name in "${longest_first[@]}"; do
  [ -n "${exe_of[$name]:-}" ] && order+=("$name")
done
for name in $(printf '%s\n' "$@" | sort); do
  [[ " ${order[*]} " == *" $name "* ]] || order+=("$name")
done

out=$repo/target/e2e-output
rm -rf "$out" && mkdir -p "$out"
lock=$out/.print-lock
failed=$out/failed
: >"$failed"

run_one() {
  local name=$1 started=$SECONDS status=ok
  if ! "${exe_of[$name]}" --include-ignored --nocapture >"$out/$name.log" 2>&1; then
    status=FAILED
    echo "$name" >>"$failed"
  fi
  # One file's output at a time, whole.
  flock "$lock" bash -c 'printf "\n[e2e] tests/%s.rs: %s in %d s\n" "$1" "$2" "$3"; cat "$4"' \
    _ "$name" "$status" $((SECONDS - started)) "$out/$name.log" >&2
}

printf '[e2e] %d files, %d at a time: %s\n' "${#order[@]}" "$jobs" "${order[*]}" >&2
for name in "${order[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  run_one "$name" &
done
wait

if [ -s "$failed" ]; then
  echo "[e2e] failed: $(sort "$failed" | tr '\n' ' ')(their output above, and in $out)" >&2
  exit 1
fi
echo "[e2e] all ${#order[@]} files passed" >&2
