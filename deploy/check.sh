#!/usr/bin/env bash
# deploy/check.sh: checks deploy/ and dashboards/ without a cluster. Exit 0 when all pass.
#
#   1. `helm lint --strict` of the chart deploy/helm/sockwatch, with its defaults, the plain
#      manifests' values and every deploy/helm/tests/values-*.yaml (Kubernetes 1.30 and 1.37)
#   2. drift: the plain manifests (deploy/*.yaml, extras/podmonitor.yaml) are the chart's
#      rendering byte for byte (else: run deploy/render.sh)
#   3. manifests: Kubernetes schemas (PyPI kubernetes-validate, strict, 1.30 and 1.37),
#      Prometheus Operator schemas (npm @kubernetes-models/prometheus-operator, plus the strict
#      subsets in deploy/schemas/), the privileged patch applied, cross-object checks and the
#      values they were rendered from (deploy/tests/validate.py)
#   4. the same for the chart rendered with its defaults (on a cluster without the Prometheus
#      Operator: no ServiceMonitor or PrometheusRule, and NOTES saying so; and with
#      `--api-versions monitoring.coreos.com/v1`: both) and with each
#      deploy/helm/tests/values-*.yaml (values-conventional.yaml: every key operators set on
#      every chart lands in the objects; runbook links under a base URL; the dashboards'
#      ConfigMap)
#   5. every deploy/helm/tests/refused-*.yaml is refused (values.schema.json or a `fail`), with
#      the message its `# refused:` line names
#   6. `promtool check rules` on the PrometheusRule's groups
#   7. `promtool test rules deploy/tests/alerts.test.yaml`: every alert fires when it should and
#      stays silent in benign series
#   8. every PromQL expression of every dashboard parses (`promtool check rules` on them as
#      recording rules)
#
# Installs what is missing, idempotently: Debian's `prometheus` package (promtool) with
# apt-get (as root), the Python packages with `pip --target` (Helm itself is PyPI's
# helm-python-sdk: deploy/helm/sdk.sh) and the npm package with `npm --prefix`, all into
# $SOCKWATCH_CHECK_CACHE (default /var/cache/sockwatch-deploy-check).
# Runs every step even after a failure; the last line is `deploy/check.sh: N passed, M failed`.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
cache="${SOCKWATCH_CHECK_CACHE:-/var/cache/sockwatch-deploy-check}"
py_packages=(kubernetes-validate==1.37.0 PyYAML==6.0.3 jsonschema==4.26.0)
npm_package="@kubernetes-models/prometheus-operator@6.0.0"

say() { echo "deploy/check.sh: $*"; }
die() { say "$*" >&2; exit 2; }

apt_updated=
apt_install() {
    [[ $EUID -eq 0 ]] || die "missing $* and not root: apt-get install $* (or run as root)"
    if [[ -z $apt_updated ]]; then
        apt-get update -qq >/dev/null || die "apt-get update failed"
        apt_updated=1
    fi
    say "installing Debian packages: $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null \
        || die "apt-get install $* failed"
}

command -v promtool >/dev/null || apt_install prometheus
command -v python3 >/dev/null || apt_install python3 python3-pip
python3 -m pip --version >/dev/null 2>&1 || apt_install python3-pip
command -v node >/dev/null && command -v npm >/dev/null || apt_install nodejs npm

mkdir -p "$cache" || die "cannot create $cache"
py_dir="$cache/py"
py_stamp="$py_dir/.installed-$(printf '%s ' "${py_packages[@]}" | sha256sum | cut -c1-16)"
if [[ ! -e $py_stamp ]]; then
    say "installing ${py_packages[*]} into $py_dir"
    rm -rf "$py_dir"
    python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
        --target "$py_dir" "${py_packages[@]}" || die "pip install ${py_packages[*]} failed"
    touch "$py_stamp"
fi
export PYTHONPATH="$py_dir${PYTHONPATH:+:$PYTHONPATH}"
# shellcheck source=helm/sdk.sh
source "$here/helm/sdk.sh"
helm_sdk_setup || die "pip install $helm_sdk_package failed"
node_dir="$cache/node"
node_stamp="$node_dir/.installed-$(echo "$npm_package" | sha256sum | cut -c1-16)"
if [[ ! -e $node_stamp ]]; then
    say "installing $npm_package into $node_dir"
    rm -rf "$node_dir"
    mkdir -p "$node_dir"
    npm install --prefix "$node_dir" --no-audit --no-fund --silent "$npm_package" \
        || die "npm install $npm_package failed"
    touch "$node_stamp"
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
step() {
    local name="$1"
    shift
    say "===== $name ====="
    if "$@"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        say "FAILED: $name"
    fi
}

alert_rules() {
    python3 "$here/tests/promrules.py" rules "$here/60-prometheusrule.yaml" >"$tmp/sockwatch.rules.yaml" \
        && promtool check rules "$tmp/sockwatch.rules.yaml"
}
alert_tests() {
    python3 "$here/tests/promrules.py" rules "$here/60-prometheusrule.yaml" >"$tmp/sockwatch.rules.yaml" \
        && cp "$here/tests/alerts.test.yaml" "$tmp/" \
        && promtool test rules "$tmp/alerts.test.yaml"
}
dashboard_exprs() {
    python3 "$here/tests/promrules.py" dashboards "$root"/dashboards/*.json >"$tmp/dashboards.rules.yaml" \
        && promtool check rules "$tmp/dashboards.rules.yaml" \
        && echo "$(grep -c 'record:' "$tmp/dashboards.rules.yaml") dashboard expressions parse"
}

render=(python3 "$here/helm/render.py")
# The plain manifests' values: what `render.py template` coalesces them to, for validate.py.
plain_manifests() {
    "${render[@]}" template --api-versions monitoring.coreos.com/v1 -f "$here/helm/plain.yaml" "$tmp/plain.yaml" \
        && python3 "$here/tests/validate.py" --deploy "$here" --release "$tmp/plain.yaml.values.json" \
            --crd-validator "$node_dir"
}
rendered() {
    local out="$tmp/rendered-$1.yaml"
    shift
    "${render[@]}" template "$@" "$out" \
        && python3 "$here/tests/validate.py" --rendered "$out" --release "$out.values.json" \
            --crd-validator "$node_dir"
}

step "helm lint --strict (defaults, helm/plain*.yaml, helm/tests/values-*.yaml)" \
    "${render[@]}" lint "$here"/helm/plain*.yaml "$here"/helm/tests/values-*.yaml
step "plain manifests are the chart's rendering (deploy/render.sh)" "${render[@]}" drift "$here"
step "plain manifests: schemas and cross-object checks" plain_manifests
# NOTES.txt of a rendering says TEXT (the release JSON carries it).
notes_say() {
    python3 -c 'import json, sys; n = json.load(open(sys.argv[1]))["notes"]; sys.exit(sys.argv[2] not in n)' \
        "$tmp/rendered-$1.yaml.values.json" "$2" \
        && echo "ok   NOTES of $1 say: $2" || { echo "FAIL NOTES of $1 do not say: $2"; false; }
}
defaults_without_operator() {
    rendered defaults \
        && notes_say defaults "NOT rendered: the ServiceMonitor/PodMonitor/PrometheusRule asked for"
}
defaults_with_operator() {
    rendered defaults-operator --api-versions monitoring.coreos.com/v1 \
        && notes_say defaults-operator "scraped through ServiceMonitor sockwatch; alerts: PrometheusRule sockwatch"
}
step "chart rendered with its defaults, no Prometheus Operator: no monitor or rule, NOTES say why" \
    defaults_without_operator
step "chart rendered with its defaults and monitoring.coreos.com/v1: ServiceMonitor and PrometheusRule" \
    defaults_with_operator
for f in "$here"/helm/tests/values-*.yaml; do
    set_name="$(basename "$f" .yaml)"
    step "chart rendered with helm/tests/$set_name.yaml: schemas and cross-object checks" \
        rendered "$set_name" -f "$f"
done
step "chart refuses helm/tests/refused-*.yaml" "${render[@]}" refused "$here"/helm/tests/refused-*.yaml
step "promtool check rules (PrometheusRule)" alert_rules
step "promtool test rules (deploy/tests/alerts.test.yaml)" alert_tests
step "dashboard PromQL parses" dashboard_exprs

say "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
