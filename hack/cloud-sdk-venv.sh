#!/usr/bin/env bash
# Creates (or reuses) a Python venv with the pinned official Alibaba Cloud SDKs,
# outside the clone, and prints the path of its python on stdout.
#
#   PY=$(bash hack/cloud-sdk-venv.sh)
#
# The venv lives at ${ROLLGATE_CACHE_DIR:-$HOME/.cache/rollgate}/py-venv-<hash>, the
# hash taken over the requirements file, so changing a pin builds a fresh venv and
# an unchanged one is reused.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
requirements="${repo_root}/crates/lb-emulator/sdk-check/requirements.txt"
python="${PYTHON:-python3}"

if ! command -v "${python}" >/dev/null 2>&1; then
  echo "cloud-sdk-venv: ${python} not found; install Python 3.9+" >&2
  exit 1
fi

hash="$( (cat "${requirements}"; "${python}" -c 'import sys; print(sys.version_info[:2])') | sha256sum | cut -c1-16)"
cache_dir="${ROLLGATE_CACHE_DIR:-${HOME}/.cache/rollgate}"
venv="${cache_dir}/py-venv-${hash}"

if [[ ! -f "${venv}/.complete" ]]; then
  mkdir -p "${cache_dir}"
  rm -rf "${venv}"
  echo "cloud-sdk-venv: creating ${venv}" >&2
  if ! "${python}" -m venv "${venv}" >&2; then
    echo "cloud-sdk-venv: 'python3 -m venv' failed; on Debian/Ubuntu: apt-get install python3-venv" >&2
    exit 1
  fi
  "${venv}/bin/python" -m pip install --quiet --disable-pip-version-check -r "${requirements}" >&2
  touch "${venv}/.complete"
fi

echo "${venv}/bin/python"
