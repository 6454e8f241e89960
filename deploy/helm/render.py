#!/usr/bin/env python3
"""Renders the sockwatch chart with Helm (PyPI helm-python-sdk: Helm 4's Go SDK as a library).

  render.py manifests DEPLOY_DIR         write the plain manifests (deploy/*.yaml, extras/)
  render.py drift DEPLOY_DIR             exit 1 with a diff when they differ from a render
  render.py template [-f VALUES]... [--api-versions G/V]... OUT
                                         every object of a release, one multi-document stream
                                         (OUT.values.json: release, namespace, API versions and
                                         the values Helm coalesced)
  render.py lint [VALUES]...             `helm lint --strict` of the chart with its defaults, and
                                         with each values file in turn
  render.py refused FILE...              each values file must be refused (schema or `fail`);
                                         its `# refused: TEXT` line says with which message

The cluster serves only the built-in APIs unless --api-versions names more (`helm template
--api-versions`): the chart renders its Prometheus Operator objects only where the cluster
serves monitoring.coreos.com/v1. The plain manifests are rendered for a cluster that does
(deploy/50-servicemonitor.yaml, 60-prometheusrule.yaml and extras/podmonitor.yaml are applied
only there).
The release is `sockwatch` in namespace `sockwatch` unless --release/--namespace, or a values
file's `# release: NAME` and `# namespace: NAME` lines, say otherwise; a values file's
`# api-versions: G/V ...` line is --api-versions.
Several -f files merge as `helm -f A -f B` does (maps key by key, the later file winning).
A rendered template is written as Helm renders it, with its leading blank lines dropped; one
that renders only blanks is no object. The plain manifests start with HEADER.
"""
import argparse
import difflib
import json
import pathlib
import sys

import helm_python as helm
from helm_python import _native

HERE = pathlib.Path(__file__).resolve().parent
CHART = HERE / "sockwatch"
HEADER = "# Generated from deploy/helm/sockwatch by deploy/render.sh; edit the chart, not this file.\n"
# The plain manifests: (file under deploy/, template, values files under deploy/helm/).
PLAIN = ["plain.yaml"]
MANIFESTS = [
    ("00-namespace.yaml", "namespace.yaml", PLAIN),
    ("10-serviceaccount.yaml", "serviceaccount.yaml", PLAIN),
    ("20-configmap.yaml", "configmap.yaml", PLAIN),
    ("30-daemonset.yaml", "daemonset.yaml", PLAIN),
    ("40-service.yaml", "service.yaml", PLAIN),
    ("50-servicemonitor.yaml", "servicemonitor.yaml", PLAIN),
    ("60-prometheusrule.yaml", "prometheusrule.yaml", PLAIN),
    ("extras/podmonitor.yaml", "podmonitor.yaml", PLAIN + ["plain-podmonitor.yaml"]),
    ("extras/networkpolicy.yaml", "networkpolicy.yaml", PLAIN + ["plain-networkpolicy.yaml"]),
]
NOT_OBJECTS = {"NOTES.txt"}
OPERATOR_API = "monitoring.coreos.com/v1"


def merge(base, over):
    """`helm -f base -f over`: maps merge key by key, anything else is replaced."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = merge(base[k], v) if k in base else v
        return out
    return over


def load_values(files):
    values = {}
    for f in files:
        values = merge(values, helm.values_from_yaml(pathlib.Path(f).read_text()))
    return values


def directive(files, key, default):
    """A values file's `# KEY: VALUE` line (the last file that has one wins)."""
    found = default
    for f in files:
        for line in pathlib.Path(f).read_text().splitlines():
            if line.startswith(f"# {key}:"):
                found = line.split(":", 1)[1].strip()
    return found


def render_all(chart, values, release, namespace, api_versions):
    """Chart.render with the cluster's extra API versions, which its keywords leave out."""
    opts = {"name": release, "namespace": namespace, "is_install": True, "api_versions": list(api_versions)}
    return json.loads(_native.call_string("helm_render", chart._raw(), json.dumps(values), json.dumps(opts)))


def render(values, release, namespace, api_versions=(), notes=False):
    """{template file name: rendered text} of the chart's objects (NOTES.txt only if `notes`)."""
    with helm.Chart.load(CHART) as chart:
        out = render_all(chart, values, release, namespace, api_versions)
        prefix = f"{chart.name}/templates/"
    rendered = {}
    for path, text in sorted(out.items()):
        name = path.removeprefix(prefix)
        text = text.lstrip("\n")
        if (notes or name not in NOT_OBJECTS) and text.strip():
            rendered[name] = text
    return rendered


def plain_manifests(release, namespace):
    """{path under deploy/: content} of the generated files."""
    renders = {}
    files = {}
    for target, template, values_files in MANIFESTS:
        key = tuple(values_files)
        if key not in renders:
            renders[key] = render(load_values(HERE / f for f in values_files), release, namespace, [OPERATOR_API])
        text = renders[key].get(template)
        if text is None:
            raise SystemExit(f"render.py: {template} renders nothing with {', '.join(values_files)}")
        files[target] = HEADER + text
    # A template the plain manifests leave out would be lost silently.
    known = {t for _, t, _ in MANIFESTS}
    extra = set(renders[tuple(PLAIN)]) - known
    if extra:
        raise SystemExit(f"render.py: templates with no plain manifest: {sorted(extra)} (add them to MANIFESTS)")
    return files


def generated_in(deploy):
    """The files of deploy/ (and extras/) that carry HEADER."""
    found = set()
    for f in list(deploy.glob("*.yaml")) + list((deploy / "extras").glob("*.yaml")):
        with open(f) as fh:
            if fh.readline() == HEADER:
                found.add(str(f.relative_to(deploy)))
    return found


def cmd_manifests(args):
    deploy = pathlib.Path(args.deploy)
    files = plain_manifests(args.release, args.namespace)
    for stale in sorted(generated_in(deploy) - set(files)):
        (deploy / stale).unlink()
        print(f"removed {stale} (no template renders it)")
    for target, text in files.items():
        path = deploy / target
        if path.exists() and path.read_text() == text:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path.relative_to(deploy.parent)}")
    return 0


def cmd_drift(args):
    deploy = pathlib.Path(args.deploy)
    files = plain_manifests(args.release, args.namespace)
    bad = 0
    for target, text in files.items():
        path = deploy / target
        have = path.read_text() if path.exists() else ""
        if have == text:
            print(f"ok   {target} is the chart's rendering")
            continue
        bad += 1
        print(f"FAIL {target} differs from the chart's rendering:")
        sys.stdout.writelines(difflib.unified_diff(
            have.splitlines(True), text.splitlines(True), f"deploy/{target}", f"rendered {target}"))
    for stale in sorted(generated_in(deploy) - set(files)):
        bad += 1
        print(f"FAIL {stale} says it is generated, but no template renders it")
    if bad:
        print("render.py: the plain manifests are not the chart's rendering: run deploy/render.sh")
        return 1
    return 0


def cmd_template(args):
    values = load_values(args.values)
    release = args.release or directive(args.values, "release", "sockwatch")
    namespace = args.namespace or directive(args.values, "namespace", "sockwatch")
    args.api_versions = args.api_versions or directive(args.values, "api-versions", "").split()
    rendered = render(values, release, namespace, args.api_versions, notes=True)
    notes = rendered.pop("NOTES.txt", "")
    with helm.Chart.load(CHART) as chart:
        merged = chart.merge_values(values)
        name = chart.name
    out = pathlib.Path(args.out)
    out.write_text("".join(f"---\n# Source: {name}/templates/{n}\n{t}" for n, t in rendered.items()))
    release_json = {"release": release, "namespace": namespace, "apiVersions": args.api_versions,
                    "values": merged, "notes": notes}
    pathlib.Path(f"{args.out}.values.json").write_text(json.dumps(release_json, indent=1) + "\n")
    print(f"rendered {', '.join(args.values) or 'the defaults'} as release {release} in namespace "
          f"{namespace}: {', '.join(rendered)}")
    return 0


def cmd_lint(args):
    bad = 0
    for f in [None] + args.files:
        values = load_values([f] if f else [])
        for kube in ["v1.30.0", "v1.37.0"]:
            report = helm.lint(CHART, values, strict=True, namespace=args.namespace, kube_version=kube)
            what = f"helm lint --strict (Kubernetes {kube}, {f or 'the defaults'})"
            for m in report.get("messages", []):
                level = {1: "INFO", 2: "WARNING", 3: "ERROR"}.get(m.get("severity"), "UNKNOWN")
                print(f"     [{level}] {m.get('path')}: {m.get('error', '').strip()}")
            # --strict: warnings fail too.
            failed = report.get("errors") or any(m.get("severity", 0) != 1 for m in report.get("messages", []))
            print(f"{'FAIL' if failed else 'ok  '} {what}: {report.get('total_charts_linted')} chart(s) linted")
            bad += bool(failed)
    return 1 if bad else 0


def cmd_refused(args):
    bad = 0
    for f in args.files:
        text = pathlib.Path(f).read_text()
        expect = [l.split(":", 1)[1].strip() for l in text.splitlines() if l.startswith("# refused:")]
        if not expect:
            print(f"FAIL {f}: no `# refused: MESSAGE` line")
            bad += 1
            continue
        try:
            render(load_values([f]), args.release, args.namespace)
        except helm.HelmError as e:
            message = " ".join(str(e).split())
            if all(x in message for x in expect):
                print(f"ok   {f} refused: {message}")
                if isinstance(e, helm.HelmValuesError):
                    # The schema refuses it: so must `helm lint`.
                    report = helm.lint(CHART, load_values([f]), strict=True, namespace=args.namespace)
                    if report.get("errors"):
                        print(f"ok   {f} refused by helm lint too")
                    else:
                        print(f"FAIL {f}: helm lint passes what the schema refuses")
                        bad += 1
            else:
                print(f"FAIL {f} refused, but not with {expect}: {message}")
                bad += 1
        else:
            print(f"FAIL {f} rendered: the chart must refuse it ({expect})")
            bad += 1
    return 1 if bad else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--release")
    p.add_argument("--namespace")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("manifests")
    s.add_argument("deploy")
    s.set_defaults(run=cmd_manifests)
    s = sub.add_parser("drift")
    s.add_argument("deploy")
    s.set_defaults(run=cmd_drift)
    s = sub.add_parser("template")
    s.add_argument("-f", "--values", action="append", default=[])
    s.add_argument("--api-versions", action="append", default=[])
    s.add_argument("out")
    s.set_defaults(run=cmd_template)
    s = sub.add_parser("lint")
    s.add_argument("files", nargs="*")
    s.set_defaults(run=cmd_lint)
    s = sub.add_parser("refused")
    s.add_argument("files", nargs="+")
    s.set_defaults(run=cmd_refused)
    args = p.parse_args()
    if args.cmd != "template":
        args.release = args.release or "sockwatch"
        args.namespace = args.namespace or "sockwatch"
    try:
        return args.run(args)
    except helm.HelmError as e:
        print(f"render.py: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
