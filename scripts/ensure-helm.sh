#!/usr/bin/env bash
# Makes sure helm is there for the chart's test (cmd/fairgate's
# TestHelmChart): on PATH, or built from the Go module proxy into
# $(go env GOPATH)/bin (the first build takes about three minutes: the
# Kubernetes modules it brings).
set -euo pipefail
HELM_VERSION=v4.3.2
command -v helm >/dev/null 2>&1 && exit 0
bin="$(go env GOPATH)/bin/helm"
[ -x "$bin" ] && "$bin" version 2>/dev/null | grep -q "v4" && exit 0
echo "ensure-helm: building helm $HELM_VERSION with go install (helm.sh/helm/v4)" >&2
GOFLAGS=-mod=mod go install "helm.sh/helm/v4/cmd/helm@$HELM_VERSION"
