#!/usr/bin/env python3
"""Rule files for promtool (and the end-to-end test's Prometheus) from deploy/ and dashboards/.

  promrules.py rules deploy/60-prometheusrule.yaml      PrometheusRule spec.groups as a rules file
  promrules.py dashboards dashboards/*.json             every panel's PromQL as recording rules,
                                                        Grafana variables replaced, so that
                                                        `promtool check rules` parses them all

Grafana variables become what a dashboard would send with "All" selected and a 5-minute range:
$job, $watch, $hook → .+ and $node → .* (they are only used in =~ matchers; a series without
a node label shows under "All" too), $__rate_interval and
$__interval → 1m, $__range → 5m. Any other variable is an error.
"""
import json
import re
import sys

import yaml

VARIABLES = {
    "__rate_interval": "1m",
    "__interval": "1m",
    "__range": "5m",
    "job": ".+",
    "node": ".*",
    "watch": ".+",
    "hook": ".+",
}


def substitute(expr, where):
    def repl(m):
        var = m.group(1) or m.group(2)
        if var not in VARIABLES:
            raise SystemExit(f"{where}: unknown Grafana variable ${var} in {expr!r}")
        return VARIABLES[var]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", repl, expr)


def exprs(node, path):
    """(path, expr) of every panel target, in document order."""
    if isinstance(node, dict):
        if isinstance(node.get("expr"), str) and node["expr"].strip():
            yield path, node["expr"]
        for k, v in node.items():
            if k != "templating":
                yield from exprs(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from exprs(v, f"{path}[{i}]")


def dashboards(files):
    groups = []
    for f in files:
        with open(f) as fh:
            d = json.load(fh)
        uid = re.sub(r"[^a-zA-Z0-9_]", "_", d["uid"])
        rules = []
        for i, (path, expr) in enumerate(exprs(d.get("panels", []), "panels")):
            rules.append({"record": f"dashboard:{uid}:{i}", "expr": substitute(expr, f"{f} {path}")})
        if not rules:
            raise SystemExit(f"{f}: no PromQL expression found")
        groups.append({"name": f"dashboard {d['uid']}", "rules": rules})
    return {"groups": groups}


def rules(file):
    with open(file) as fh:
        docs = [d for d in yaml.safe_load_all(fh) if d]
    (rule,) = [d for d in docs if d.get("kind") == "PrometheusRule"]
    return {"groups": rule["spec"]["groups"]}


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("rules", "dashboards"):
        raise SystemExit(__doc__)
    out = rules(sys.argv[2]) if sys.argv[1] == "rules" else dashboards(sys.argv[2:])
    yaml.safe_dump(out, sys.stdout, sort_keys=False, width=1000)


if __name__ == "__main__":
    main()
