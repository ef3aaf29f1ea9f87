#!/usr/bin/env bash
# Makes sure nginx (with auth_request) and Caddy are on PATH for the
# gateway tests (cmd/fairgate/gateway_test.go), which start their own on
# free loopback ports. As root on a Debian-like system it installs them
# with apt-get; otherwise it says how.
set -euo pipefail
have() { command -v nginx >/dev/null 2>&1 && nginx -V 2>&1 | grep -q http_auth_request && command -v caddy >/dev/null 2>&1; }
have && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-gateways: installing nginx and caddy with apt-get" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq nginx caddy >/dev/null
  # Debian starts no service here without systemd; make sure none holds a port.
  pkill -x nginx 2>/dev/null || true
  pkill -x caddy 2>/dev/null || true
  have && exit 0
  echo "ensure-gateways: apt-get ran but nginx (with auth_request) or caddy is still missing" >&2
  exit 1
fi
echo "ensure-gateways: the gateway tests need nginx (with the auth_request module) and caddy: run 'sudo apt-get install nginx caddy', then 'make test' again" >&2
exit 1
