#!/usr/bin/env bash
# Installs Debian's chromium for the dashboard's browser tests
# (cmd/wahook/ui_browser_test.go drives it with chromedp). Nothing to do when
# a chromium is already on the PATH. Needs root or sudo for apt-get.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
	exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get -o DPkg::Lock::Timeout=300 update
$sudo env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends chromium
chromium --version
