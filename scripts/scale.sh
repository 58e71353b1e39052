#!/usr/bin/env bash
# `make scale`: the scale suite (tests/scale, issue 23) against real `shale` processes of a
# release build: millions of documents, gigabytes of data, each test's time and every
# process's peak RSS (a table at the end, also in build-release/scale-report.md). Long (about
# half an hour on 2 cores), so kept out of `make test`. SHALE_BIN must point at the binary;
# extra arguments go to pytest (e.g. -k distinct).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
: "${SHALE_BIN:?SHALE_BIN must point at the shale binary}"
export SHALE_BIN
export SCALE_REPORT=${SCALE_REPORT:-$top/build-release/scale-report.md}
cd "$top/tests/scale"
exec /usr/bin/python3 -m pytest -q -p no:cacheprovider -rfE "$@"
