#!/usr/bin/env bash
# Makes sure wrk (a C HTTP load generator, light on the cores it shares
# with the server under test) is on PATH for `make bench-service`. As root
# on a Debian-like system it installs it with apt-get; otherwise it says how.
set -euo pipefail
if command -v wrk >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-wrk: installing wrk with apt-get" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq wrk >/dev/null
  command -v wrk >/dev/null && exit 0
  echo "ensure-wrk: apt-get ran but wrk is still missing" >&2
  exit 1
fi
echo "ensure-wrk: the service benchmarks need wrk: run 'sudo apt-get install wrk', then 'make bench-service' again" >&2
exit 1
