#!/usr/bin/env python3
"""Validates the manifests in deploy/ and what ties them together.

- Kubernetes kinds: kubernetes-validate's bundled schemas, strict (an unknown field fails), for
  every version in --k8s-versions.
- Prometheus Operator kinds: the strict subset schemas in deploy/schemas/ (only the fields
  sockwatch uses, no unknown field), and the operator's own schemas through the npm package
  @kubernetes-models/prometheus-operator (--crd-validator: the node prefix it is installed in).
- extras/privileged-patch.yaml applied to the DaemonSet, the result validated too.
- Cross-object checks: selectors match labels, ports and names agree, probes hit the agent's
  endpoints, the DaemonSet gives the pod its node's name, every alert has its annotations, is
  keyed by node and links its section of docs/runbooks.md, the Dockerfile runs the binary the
  DaemonSet names.

Exit status 1 on any failure; one line per check.
"""
import argparse
import copy
import json
import pathlib
import re
import subprocess
import sys
import tempfile

import jsonschema
import kubernetes_validate
import yaml

CRD_SCHEMAS = {
    "ServiceMonitor": "servicemonitor.strict.json",
    "PodMonitor": "podmonitor.strict.json",
    "PrometheusRule": "prometheusrule.strict.json",
}
ALERTS = {
    "SockwatchOrphanedListener",
    "SockwatchTakenOverListenerLingers",
    "SockwatchForeignUnlink",
    "SockwatchStaleConnects",
    "SockwatchStaleBindMount",
    "SockwatchSocketFileMount",
    "SockwatchLosingEvents",
    "SockwatchEventsOutputFailing",
    "SockwatchScanFailing",
    "SockwatchProbesDegraded",
    "SockwatchHookMissing",
    "SockwatchDown",
}
CAPABILITIES = ["BPF", "PERFMON", "SYS_ADMIN", "SYS_PTRACE", "DAC_READ_SEARCH"]
NAMESPACE = "sockwatch"
RUNBOOKS = "docs/runbooks.md"
PORT = 9469

failures = []


def ok(what):
    print(f"ok   {what}")


def fail(what, why):
    print(f"FAIL {what}: {why}")
    failures.append(what)


def check(cond, what, why):
    if cond:
        ok(what)
    else:
        fail(what, why)


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def name(doc):
    return f"{doc.get('kind')} {doc.get('metadata', {}).get('name')}"


def validate_k8s(doc, source, versions):
    for v in versions:
        what = f"{source}: {name(doc)} (Kubernetes {v}, strict)"
        try:
            kubernetes_validate.validate(doc, v, strict=True)
            ok(what)
        except kubernetes_validate.ValidationError as e:
            path = "/".join(str(p) for p in e.path)
            fail(what, f"{path}: {e.message}")
        except Exception as e:  # unknown kind or version
            fail(what, str(e))


def validate_crd_subset(doc, source, schemas):
    what = f"{source}: {name(doc)} (deploy/schemas, strict)"
    schema = json.loads((schemas / CRD_SCHEMAS[doc["kind"]]).read_text())
    errors = sorted(
        jsonschema.Draft7Validator(schema).iter_errors(doc), key=lambda e: list(e.path)
    )
    if errors:
        fail(what, "; ".join(f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors))
    else:
        ok(what)


def merge_patch(base, patch):
    """A strategic merge patch, as far as the privileged patch needs: maps merge, lists of
    maps with a `name` merge by name."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            out[k] = merge_patch(base[k], v) if k in base else v
        return out
    if isinstance(base, list) and isinstance(patch, list) and all(
        isinstance(x, dict) and "name" in x for x in base + patch
    ):
        out = [copy.deepcopy(x) for x in base]
        for p in patch:
            i = next((i for i, b in enumerate(out) if b["name"] == p["name"]), None)
            if i is None:
                out.append(p)
            else:
                out[i] = merge_patch(out[i], p)
        return out
    return patch


def heading_anchors(markdown):
    """The anchors GitHub gives a Markdown file's headings (lower case, punctuation dropped,
    spaces to dashes)."""
    headings = re.findall(r"^#+\s+(.+?)\s*$", markdown, re.M)
    return {re.sub(r"[^\w\- ]", "", h).lower().replace(" ", "-") for h in headings}


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def cross_checks(objs, deploy):
    by_kind = {}
    for source, doc in objs:
        by_kind.setdefault(doc["kind"], []).append((source, doc))

    def one(kind):
        found = by_kind.get(kind, [])
        check(len(found) == 1, f"one {kind}", f"found {len(found)}")
        return found[0][1] if found else {}

    ns = one("Namespace")
    ds = one("DaemonSet")
    svc = one("Service")
    sm = one("ServiceMonitor")
    pm = one("PodMonitor")
    rule = one("PrometheusRule")
    sa = one("ServiceAccount")
    cm = one("ConfigMap")

    check(
        ns.get("metadata", {}).get("labels", {}).get("pod-security.kubernetes.io/enforce")
        == "privileged",
        "Namespace admits privileged pods",
        "pod-security.kubernetes.io/enforce must be privileged",
    )
    for source, doc in objs:
        if doc["kind"] != "Namespace":
            check(
                doc["metadata"].get("namespace") == NAMESPACE,
                f"{source}: {name(doc)} in namespace {NAMESPACE}",
                f"namespace is {doc['metadata'].get('namespace')}",
            )
    applied = sorted(p.name for p in deploy.glob("*.yaml"))
    check(
        applied and applied[0].startswith("00-") and "namespace" in applied[0],
        "kubectl apply -f deploy/ creates the namespace first",
        f"files in order: {applied}",
    )

    spec = ds.get("spec", {})
    pod = spec.get("template", {}).get("spec", {})
    pod_labels = spec.get("template", {}).get("metadata", {}).get("labels", {})
    check(matches(spec.get("selector", {}), pod_labels), "DaemonSet selector matches its pods",
          f"{spec.get('selector')} vs {pod_labels}")
    check(pod.get("hostPID") is True and pod.get("hostNetwork") is True,
          "DaemonSet: hostPID and hostNetwork", "both must be true")
    check(pod.get("serviceAccountName") == sa.get("metadata", {}).get("name"),
          "DaemonSet uses the ServiceAccount", pod.get("serviceAccountName"))
    containers = pod.get("containers", [])
    c = next((c for c in containers if c.get("name") == "sockwatch"), {})
    check(bool(c), "DaemonSet has the sockwatch container", "missing")
    args = c.get("args", [])
    check(args[:1] == ["run"], "container runs `sockwatch run`", f"args {args}")
    listen = args[args.index("--listen") + 1] if "--listen" in args else None
    check(listen == f"0.0.0.0:{PORT}", f"container listens on 0.0.0.0:{PORT}", f"--listen {listen}")
    ports = {p.get("name"): p for p in c.get("ports", [])}
    check(ports.get("metrics", {}).get("containerPort") == PORT, f"container port metrics={PORT}",
          f"{ports}")
    for probe, path in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz"),
                        ("startupProbe", "/healthz")]:
        get = c.get(probe, {}).get("httpGet", {})
        check(get.get("path") == path and get.get("port") == "metrics",
              f"{probe} on {path}", f"{get}")
    env = {e.get("name"): e for e in c.get("env", [])}
    node_name = env.get("NODE_NAME", {}).get("valueFrom", {}).get("fieldRef", {})
    check(node_name.get("fieldPath") == "spec.nodeName",
          "container gets NODE_NAME from spec.nodeName", f"env {c.get('env')}")
    res = c.get("resources", {})
    check(all(k in res.get(t, {}) for t in ("requests", "limits") for k in ("cpu", "memory")),
          "container has cpu and memory requests and limits", f"{res}")
    sc = c.get("securityContext", {})
    check(sc.get("privileged") is False and sorted(sc.get("capabilities", {}).get("add", []))
          == sorted(CAPABILITIES) and sc.get("capabilities", {}).get("drop") == ["ALL"],
          "container: not privileged, drops all, adds exactly " + ",".join(CAPABILITIES), f"{sc}")
    cm_name = cm.get("metadata", {}).get("name")
    config_vols = [v for v in pod.get("volumes", []) if v.get("configMap", {}).get("name") == cm_name]
    check(len(config_vols) == 1, "DaemonSet mounts the ConfigMap", f"volumes {pod.get('volumes')}")
    mounts = {m["name"]: m for m in c.get("volumeMounts", [])}
    if config_vols and "--config" in args:
        cfg = args[args.index("--config") + 1]
        m = mounts.get(config_vols[0]["name"], {})
        key = cfg.rsplit("/", 1)[-1]
        check(cfg.startswith(m.get("mountPath", "?") + "/") and key in cm.get("data", {}),
              f"--config {cfg} is the ConfigMap's {key}", f"mount {m}, keys {list(cm.get('data', {}))}")
    vols = {v["name"] for v in pod.get("volumes", [])}
    check(set(mounts) <= vols, "every volumeMount has its volume", f"{set(mounts) - vols}")
    for path in ["/sys/kernel/btf", "/sys/fs/bpf", "/sys/kernel/tracing", "/run", "/var/log/pods"]:
        check(any(m.get("mountPath") == path for m in mounts.values()), f"mounts {path}", "missing")

    svc_selector = svc.get("spec", {}).get("selector", {})
    check(bool(svc_selector) and all(pod_labels.get(k) == v for k, v in svc_selector.items()),
          "Service selects the agent pods", f"{svc_selector} vs {pod_labels}")
    svc_ports = {p.get("name"): p for p in svc.get("spec", {}).get("ports", [])}
    check(svc_ports.get("metrics", {}).get("targetPort") == "metrics"
          and svc_ports["metrics"].get("port") == PORT, "Service port metrics → container port",
          f"{svc_ports}")
    svc_labels = svc.get("metadata", {}).get("labels", {})
    sm_spec = sm.get("spec", {})
    check(matches(sm_spec.get("selector", {}), svc_labels), "ServiceMonitor selects the Service",
          f"{sm_spec.get('selector')} vs {svc_labels}")
    check(all(e.get("port") in svc_ports for e in sm_spec.get("endpoints", [])),
          "ServiceMonitor endpoints name Service ports", f"{sm_spec.get('endpoints')}")
    check(svc_labels.get(sm_spec.get("jobLabel")) == "sockwatch",
          "ServiceMonitor sets job=sockwatch", f"jobLabel {sm_spec.get('jobLabel')}")
    pm_spec = pm.get("spec", {})
    check(matches(pm_spec.get("selector", {}), pod_labels), "PodMonitor selects the agent pods",
          f"{pm_spec.get('selector')} vs {pod_labels}")
    check(all(e.get("port") in ports for e in pm_spec.get("podMetricsEndpoints", [])),
          "PodMonitor endpoints name container ports", f"{pm_spec.get('podMetricsEndpoints')}")
    check(pod_labels.get(pm_spec.get("jobLabel")) == "sockwatch",
          "PodMonitor sets job=sockwatch", f"jobLabel {pm_spec.get('jobLabel')}")

    rules = [r for g in rule.get("spec", {}).get("groups", []) for r in g.get("rules", [])]
    alerts = {r.get("alert") for r in rules if "alert" in r}
    check(alerts == ALERTS, "PrometheusRule has exactly the sockwatch alerts",
          f"missing {ALERTS - alerts}, extra {alerts - ALERTS}")
    anchors = heading_anchors((deploy.parent / RUNBOOKS).read_text())
    for r in rules:
        a = r.get("annotations", {})
        check(r.get("labels", {}).get("severity") in ("critical", "warning", "info")
              and all(a.get(k, "").strip() for k in ("summary", "description", "runbook_url")),
              f"alert {r.get('alert')}: severity, summary, description and runbook_url", f"{r}")
        url = a.get("runbook_url", "")
        check(url == f"{RUNBOOKS}#{str(r.get('alert')).lower()}" and url.split("#")[-1] in anchors,
              f"alert {r.get('alert')}: runbook_url is its section of {RUNBOOKS}",
              f"{url!r}; sections {sorted(anchors)}")
        expr = r.get("expr", "")
        check(re.search(r"\bnode\b", expr) and "instance" not in expr,
              f"alert {r.get('alert')}: keyed by node, not instance", expr)

    dockerfile = (deploy / "Dockerfile").read_text()
    entry = re.search(r'^ENTRYPOINT \["([^"]+)"\]', dockerfile, re.M)
    check(entry and c.get("command", [None])[0] == entry.group(1),
          "DaemonSet command is the image's ENTRYPOINT", f"{entry and entry.group(1)} vs {c.get('command')}")
    cmd = re.search(r"^CMD (\[.*\])", dockerfile, re.M)
    check(cmd and json.loads(cmd.group(1)) == ["run", "--listen", f"0.0.0.0:{PORT}"],
          f"image runs `sockwatch run --listen 0.0.0.0:{PORT}`", cmd and cmd.group(1))
    check(re.search(rf"^EXPOSE {PORT}\b", dockerfile, re.M) is not None, f"image exposes {PORT}",
          "no EXPOSE")
    return ds


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--deploy", default=str(pathlib.Path(__file__).resolve().parents[1]))
    p.add_argument("--k8s-versions", default="1.30.0,1.37.0")
    p.add_argument("--crd-validator", help="npm prefix holding @kubernetes-models/prometheus-operator")
    args = p.parse_args()
    deploy = pathlib.Path(args.deploy)
    versions = args.k8s_versions.split(",")
    files = sorted(deploy.glob("*.yaml")) + sorted((deploy / "extras").glob("*.yaml"))
    patch_file = deploy / "extras" / "privileged-patch.yaml"
    objs = []
    for f in files:
        if f == patch_file:
            continue
        source = str(f.relative_to(deploy.parent))
        for doc in load(f):
            objs.append((source, doc))
            if doc.get("apiVersion") == "monitoring.coreos.com/v1":
                validate_crd_subset(doc, source, deploy / "schemas")
            else:
                validate_k8s(doc, source, versions)
    ds = cross_checks(objs, deploy)
    patched = merge_patch(ds, load(patch_file)[0])
    psc = patched["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    check(psc.get("privileged") is True, "privileged patch makes the container privileged", f"{psc}")
    validate_k8s(patched, "DaemonSet + extras/privileged-patch.yaml", versions)
    crds = [{"source": s, "object": d} for s, d in objs if d.get("apiVersion") == "monitoring.coreos.com/v1"]
    if args.crd_validator:
        with tempfile.NamedTemporaryFile("w", suffix=".json") as tmp:
            json.dump(crds, tmp)
            tmp.flush()
            here = pathlib.Path(__file__).resolve().parent
            r = subprocess.run(["node", str(here / "validate-crds.mjs"), args.crd_validator, tmp.name])
            if r.returncode != 0:
                failures.append("@kubernetes-models/prometheus-operator validation")
    else:
        print("note: --crd-validator not given: Prometheus Operator kinds checked against deploy/schemas only")
    print(f"validate: {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
