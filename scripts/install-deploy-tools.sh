#!/usr/bin/env bash
# Installs what the deploy checks (deploy/tools) need, so that their tests
# download nothing: promtool and prometheus (Debian's prometheus package),
# docker-compose (Debian's, validates a compose file without a container
# engine), helm built from its Go module at a pinned version into .cache/bin,
# and the deploy/tools module's Go dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

HELM_VERSION=v4.3.2

missing=()
command -v promtool >/dev/null || missing+=(prometheus)
command -v prometheus >/dev/null || missing+=(prometheus)
command -v docker-compose >/dev/null || missing+=(docker-compose)
if [ ${#missing[@]} -gt 0 ]; then
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	$sudo apt-get -o DPkg::Lock::Timeout=300 update -qq
	# Debian's prometheus package starts a service where systemd runs; the
	# tests use their own prometheus on a free port and never talk to it.
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends \
		$(printf '%s\n' "${missing[@]}" | sort -u) >/dev/null
fi

mkdir -p .cache/bin
# helm prints only major.minor as its version: a stamp file records the build.
if ! [ -x .cache/bin/helm ] || [ "$(cat .cache/bin/helm.version 2>/dev/null)" != "$HELM_VERSION" ]; then
	GOBIN="$PWD/.cache/bin" go install "helm.sh/helm/v4/cmd/helm@$HELM_VERSION"
	echo "$HELM_VERSION" > .cache/bin/helm.version
fi

(cd deploy/tools && go mod download)
echo "deploy tools: $(promtool --version 2>&1 | head -1); $(docker-compose version --short); helm $(cat .cache/bin/helm.version)"
