#!/usr/bin/env bash
# deploy/render.sh: renders the plain manifests deploy/00-namespace.yaml … 60-prometheusrule.yaml
# and deploy/extras/podmonitor.yaml from the Helm chart deploy/helm/sockwatch (release
# `sockwatch`, namespace `sockwatch`, the chart's defaults plus deploy/helm/plain.yaml; the
# PodMonitor with deploy/helm/plain-podmonitor.yaml too). Idempotent: rewrites only files that
# change. deploy/check.sh fails while they differ from a rendering.
#
# Installs PyPI's helm-python-sdk (pinned) if missing, like deploy/check.sh (deploy/helm/sdk.sh).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=helm/sdk.sh
source "$here/helm/sdk.sh"
command -v python3 >/dev/null || { echo "deploy/render.sh: python3 is missing" >&2; exit 2; }
helm_sdk_setup || { echo "deploy/render.sh: pip install $helm_sdk_package failed" >&2; exit 2; }
python3 "$here/helm/render.py" manifests "$here"
python3 "$here/helm/render.py" drift "$here" >/dev/null
echo "deploy/render.sh: the plain manifests are the chart's rendering"
