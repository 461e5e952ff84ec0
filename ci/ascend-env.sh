#!/usr/bin/env bash
# Run a command in CANN's environment (Atlas 800I A2 / Ascend 910B runners).
#
#   ci/ascend-env.sh CMD [ARG...]     source set_env.sh, then exec CMD
#   ci/ascend-env.sh --github-env     also append the variables below to $GITHUB_ENV for later steps
#
# set_env.sh is $ASCEND_SET_ENV, else CANN 8.5's /usr/local/Ascend/cann/set_env.sh, else the older
# /usr/local/Ascend/ascend-toolkit/set_env.sh. triton-ascend raises "ASCEND_HOME_PATH is not set" when it
# builds its launcher without it, so that one is required; the others are reported when missing.
set -euo pipefail

FORWARDED=(ASCEND_HOME_PATH ASCEND_TOOLKIT_HOME ASCEND_OPP_PATH ASCEND_AICPU_PATH TOOLCHAIN_HOME
           LD_LIBRARY_PATH PYTHONPATH PATH)

setenv=""
for candidate in "${ASCEND_SET_ENV:-}" /usr/local/Ascend/cann/set_env.sh /usr/local/Ascend/ascend-toolkit/set_env.sh; do
  if [ -n "$candidate" ] && [ -f "$candidate" ]; then
    setenv=$candidate
    break
  fi
done
if [ -z "$setenv" ]; then
  echo "ascend-env: no CANN set_env.sh (set ASCEND_SET_ENV, or install CANN 8.5.0 under /usr/local/Ascend)" >&2
  exit 2
fi

set +u  # set_env.sh reads variables that may be unset
# shellcheck source=/dev/null
source "$setenv"
set -u

if [ -z "${ASCEND_HOME_PATH:-}" ]; then
  echo "ascend-env: $setenv did not set ASCEND_HOME_PATH (triton-ascend needs it to build its launcher)" >&2
  exit 2
fi
for var in ASCEND_TOOLKIT_HOME ASCEND_OPP_PATH ASCEND_AICPU_PATH TOOLCHAIN_HOME; do
  [ -n "${!var:-}" ] || echo "ascend-env: warning: $setenv did not set $var" >&2
done
for var in "${FORWARDED[@]}"; do
  export "${var?}=${!var:-}"
done

if [ "${1:-}" = "--github-env" ]; then
  : "${GITHUB_ENV:?--github-env needs GITHUB_ENV (GitHub Actions sets it)}"
  for var in "${FORWARDED[@]}"; do
    printf '%s=%s\n' "$var" "${!var:-}" >> "$GITHUB_ENV"
  done
  shift
  [ $# -gt 0 ] || exit 0
fi
if [ $# -eq 0 ]; then
  echo "usage: ci/ascend-env.sh [--github-env] CMD [ARG...]" >&2
  exit 2
fi
exec "$@"
