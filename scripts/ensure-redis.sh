#!/usr/bin/env bash
# Makes sure redis-server and redis-cli (Redis >= 6.2) are on PATH for the
# tests, which start their own servers on free loopback ports. As root on a
# Debian-like system it installs them with apt-get; otherwise it says how.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-redis: installing redis-server with apt-get" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq redis-server >/dev/null
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null && exit 0
  echo "ensure-redis: apt-get ran but redis-server or redis-cli is still missing" >&2
  exit 1
fi
echo "ensure-redis: the tests need redis-server and redis-cli: run 'sudo apt-get install redis-server' (or your system's equivalent), then 'make test' again" >&2
exit 1
