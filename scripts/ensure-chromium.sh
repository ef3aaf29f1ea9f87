#!/usr/bin/env bash
# Makes sure a Chromium is on PATH for the dashboard's browser test
# (internal/dash), which drives it headless with chromedp. As root on a
# Debian-like system it installs Debian's chromium with apt-get; otherwise
# it says how.
set -euo pipefail
for b in chromium chromium-browser google-chrome; do
  if command -v "$b" >/dev/null 2>&1; then exit 0; fi
done
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-chromium: installing chromium with apt-get (for the dashboard's browser test)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq chromium >/dev/null
  command -v chromium >/dev/null && exit 0
  echo "ensure-chromium: apt-get ran but chromium is still missing" >&2
  exit 1
fi
echo "ensure-chromium: the dashboard test needs Chromium: run 'sudo apt-get install chromium' (or your system's equivalent), then 'make test' again" >&2
exit 1
