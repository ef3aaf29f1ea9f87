#!/usr/bin/env bash
# Makes sure podman (the container image test) and systemd-analyze (the
# unit test) are on PATH for cmd/fairgate's packaging tests. As root on a
# Debian-like system it installs them with apt-get; otherwise it says how,
# and the tests skip with the same message.
set -euo pipefail
have() { command -v podman >/dev/null 2>&1 && command -v systemd-analyze >/dev/null 2>&1; }
have && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-packaging: installing podman and systemd with apt-get" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq podman systemd >/dev/null
  have && exit 0
  echo "ensure-packaging: apt-get ran but podman or systemd-analyze is still missing" >&2
  exit 1
fi
echo "ensure-packaging: the packaging tests need podman and systemd-analyze: run 'sudo apt-get install podman systemd', then 'make test' again" >&2
exit 1
