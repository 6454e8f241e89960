#!/usr/bin/env python3
"""Validates sockwatch's Kubernetes objects (deploy/ or a rendering of the chart) and what ties them together.

  validate.py --deploy DEPLOY_DIR --release RELEASE.json     the plain manifests of deploy/
  validate.py --rendered PATH --release RELEASE.json         a rendering: a directory of YAML
                                                             files, or one multi-document stream
                                                             (`-`: stdin)

RELEASE.json is what `deploy/helm/render.py template` writes beside its stream: the release's
name, namespace, the cluster's extra API versions and the values Helm coalesced ({"release",
"namespace", "apiVersions", "values"}); the checks expect what those values say (deploy/: the
chart's defaults with deploy/helm/plain.yaml, for a cluster with the Prometheus Operator). The
ServiceMonitor, PodMonitor and PrometheusRule are expected only where apiVersions has
monitoring.coreos.com/v1.

- Kubernetes kinds: kubernetes-validate's bundled schemas, strict (an unknown field fails), for
  every version in --k8s-versions.
- Prometheus Operator kinds: the strict subset schemas in deploy/schemas/ (only the fields
  sockwatch uses, no unknown field), and the operator's own schemas through the npm package
  @kubernetes-models/prometheus-operator (--crd-validator: the node prefix it is installed in).
- Cross-object checks: selectors match labels, ports and names agree, probes hit the agent's
  endpoints, the DaemonSet gives the pod its node's name, hostPath volumes are mounted at their
  host paths and every watch is below one, sockwatch.toml parses and has only keys the agent
  documents, every alert has its annotations, is keyed by node and links its section of
  docs/runbooks.md.
- The values: the objects rendered are those the values enable and carry what the values say
  (image, args, probe mode, settings, guard, watches, privileges, network, placement,
  resources, labels, scrape intervals), the conventional keys included (nameOverride,
  serviceAccount, podSecurityContext, securityContext, probes, Service annotations, monitor
  relabelings, rule labels, disabled alerts, runbook base URL, dashboards ConfigMap).
- deploy/ only: the namespace is created first, extras/podmonitor.yaml is the alternative to the
  Service and ServiceMonitor, extras/networkpolicy.yaml is the chart's NetworkPolicy, extras/privileged-patch.yaml applied to the DaemonSet gives the
  securityContext of securityProfile=privileged, the Dockerfile runs the binary the DaemonSet
  names.

Exit status 1 on any failure; one line per check.
"""
import argparse
import copy
import hashlib
import json
import pathlib
import re
import subprocess
import sys
import tempfile
import tomllib

import jsonschema
import kubernetes_validate
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
CRD_SCHEMAS = {
    "ServiceMonitor": "servicemonitor.strict.json",
    "PodMonitor": "podmonitor.strict.json",
    "PrometheusRule": "prometheusrule.strict.json",
}
ALERTS = {
    "SockwatchOrphanedListener",
    "SockwatchTakenOverListenerLingers",
    "SockwatchForeignUnlink",
    "SockwatchSocketHijacked",
    "SockwatchUnlinkDenied",
    "SockwatchStaleConnects",
    "SockwatchStaleBindMount",
    "SockwatchSocketFileMount",
    "SockwatchLosingEvents",
    "SockwatchEventsOutputFailing",
    "SockwatchScanFailing",
    "SockwatchProbesDegraded",
    "SockwatchHookMissing",
    "SockwatchGuardUnavailable",
    "SockwatchDown",
}
# sockwatch/tests/it/privilege.rs proves this set enough.
CAPABILITIES = ["BPF", "PERFMON", "SYS_ADMIN", "SYS_PTRACE", "DAC_READ_SEARCH"]
SECURITY_CONTEXTS = {
    "minimal": {
        "runAsUser": 0,
        "runAsGroup": 0,
        "privileged": False,
        "allowPrivilegeEscalation": True,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"], "add": CAPABILITIES},
        "seccompProfile": {"type": "RuntimeDefault"},
        "appArmorProfile": {"type": "Unconfined"},
    },
    "privileged": {
        "runAsUser": 0,
        "runAsGroup": 0,
        "privileged": True,
        "allowPrivilegeEscalation": True,
        "readOnlyRootFilesystem": True,
        "seccompProfile": {"type": "Unconfined"},
        "appArmorProfile": {"type": "Unconfined"},
    },
}
# Host directories the container needs, mounted at their own paths.
REQUIRED_MOUNTS = ["/sys/kernel/btf", "/sys/kernel/tracing", "/run",
                   "/var/lib/kubelet/device-plugins", "/var/log/pods"]
# Where the agent reads pod names from (attribution/pods.rs), whatever the kubelet's podLogsDir.
POD_LOGS = "/var/log/pods"
# Mounts the agent has no use for: it pins no BPF program or map.
UNUSED_MOUNTS = ["/sys/fs/bpf"]
CONFIG_PATH = "/etc/sockwatch/sockwatch.toml"
# A watch's values and their sockwatch.toml keys.
WATCH_KEYS = {"name": "name", "path": "path", "guard": "guard",
              "guardAllowComms": "guard_allow_comms", "guardAllowCgroups": "guard_allow_cgroups"}
# Where the guard's allow-listed cgroups are resolved: the node's cgroup2 hierarchy, mounted
# only when some allow-list names a cgroup.
CGROUP2 = "/sys/fs/cgroup"
CONFIG_DOC = REPO / "sockwatch/src/config/mod.rs"
RUNBOOKS = "docs/runbooks.md"
OPERATOR_API = "monitoring.coreos.com/v1"
DASHBOARDS = REPO / "dashboards"
CHART = "sockwatch"
# The image's own command line (deploy/Dockerfile).
IMAGE_PORT = 9469

# libyaml's parser where PyYAML has it: several times faster.
Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
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
        return [d for d in yaml.load_all(f, Loader=Loader) if d is not None]


def load_stream(text, label):
    """(source, object) of every document of a multi-document stream; the source is the
    document's `# Source:` line (as `helm template` and render.py write it), else its index."""
    out = []
    for i, chunk in enumerate(re.split(r"^---[ \t]*$", text, flags=re.M)):
        doc = yaml.load(chunk, Loader=Loader)
        if doc is None:
            continue
        m = re.search(r"^# Source: (.+)$", chunk, re.M)
        out.append((m.group(1).strip() if m else f"{label} document {i}", doc))
    return out


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
    if doc.get("kind") not in CRD_SCHEMAS:
        fail(what, f"no schema for {doc.get('kind')} in deploy/schemas")
        return
    schema = json.loads((schemas / CRD_SCHEMAS[doc["kind"]]).read_text())
    errors = sorted(
        jsonschema.Draft7Validator(schema).iter_errors(doc), key=lambda e: list(e.path)
    )
    if errors:
        fail(what, "; ".join(f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors))
    else:
        ok(what)


def validate_objects(objs, versions, schemas):
    for source, doc in objs:
        if doc.get("apiVersion") == "monitoring.coreos.com/v1":
            validate_crd_subset(doc, source, schemas)
        else:
            validate_k8s(doc, source, versions)


def merge_patch(base, patch):
    """A strategic merge patch, as far as the privileged patch needs: maps merge (null deletes
    a key), lists of maps with a `name` merge by name."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            else:
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


def config_keys():
    """The settings file's keys, from the agent's own documentation of it (the top doc comment
    of sockwatch/src/config/mod.rs): {key}, {table: {key}}."""
    doc = CONFIG_DOC.read_text()
    block = doc.split("```toml", 1)[1].split("```", 1)[0]
    keys, tables, table = set(), {}, None
    for line in block.splitlines():
        line = line.removeprefix("//!").strip()
        if m := re.match(r"^\[\[(\w+)\]\]", line):
            table = m.group(1)
            tables[table] = set()
        elif m := re.match(r"^(\w+)\s*=", line):
            (tables[table] if table else keys).add(m.group(1))
    return keys, tables


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def fullname(release, values):
    name = values.get("nameOverride") or CHART
    if values.get("fullnameOverride"):
        return values["fullnameOverride"][:63].rstrip("-")
    if name in release:
        return release[:63].rstrip("-")
    return f"{release}-{name}"[:63].rstrip("-")


def deep_merge(base, over):
    """Helm's mustMergeOverwrite: maps merge key by key, anything else is replaced."""
    out = dict(base)
    for k, val in over.items():
        out[k] = deep_merge(out[k], val) if isinstance(out.get(k), dict) and isinstance(val, dict) else val
    return out


def kind_of(doc):
    """The object's kind; the dashboards' ConfigMap is a kind of its own here."""
    if doc["kind"] == "ConfigMap" and doc.get("metadata", {}).get("name", "").endswith("-dashboards"):
        return "DashboardsConfigMap"
    return doc["kind"]


def subset(small, big):
    return all(big.get(k) == v for k, v in (small or {}).items())


def cross_checks(objs, release, alternatives=()):
    """`alternatives`: kinds present besides what the values enable (deploy/extras/)."""
    ns_name = release["namespace"]
    v = release["values"]
    m = v["metrics"]
    port = m["port"]
    full = fullname(release["release"], v)
    selector_labels = {
        "app.kubernetes.io/name": CHART,
        "app.kubernetes.io/instance": release["release"],
        "app.kubernetes.io/component": "agent",
    }
    by_kind = {}
    for source, doc in objs:
        by_kind.setdefault(kind_of(doc), []).append((source, doc))
    operator = OPERATOR_API in release.get("apiVersions", [])

    enabled = {
        "Namespace": v["namespace"]["create"],
        "ServiceAccount": v["serviceAccount"]["create"],
        "ConfigMap": True,
        "DashboardsConfigMap": v["dashboards"]["enabled"],
        "DaemonSet": True,
        "Service": m["service"]["enabled"],
        # Only where the cluster serves the Prometheus Operator's API.
        "ServiceMonitor": m["serviceMonitor"]["enabled"] and operator,
        "PodMonitor": m["podMonitor"]["enabled"] and operator,
        "PrometheusRule": m["prometheusRule"]["enabled"] and operator,
        "NetworkPolicy": v["networkPolicy"]["enabled"],
    }
    for kind, on in enabled.items():
        n = len(by_kind.get(kind, []))
        if on or kind in alternatives:
            check(n == 1, f"one {kind}", f"found {n}")
        else:
            check(n == 0, f"no {kind} (not enabled{'' if operator else ', or no ' + OPERATOR_API + ' API'})", f"found {n}")
    unknown = sorted(set(by_kind) - set(enabled))
    check(not unknown, "no object of another kind", f"{unknown}")

    def one(kind):
        found = by_kind.get(kind, [])
        return found[0][1] if len(found) == 1 else {}

    for source, doc in objs:
        md = doc.get("metadata", {})
        labels = md.get("labels", {})
        what = f"{source}: {name(doc)}"
        own_name = {"DashboardsConfigMap": f"{full}-dashboards",
                    "ServiceAccount": v["serviceAccount"]["name"] or full}.get(kind_of(doc), full)
        if doc["kind"] == "Namespace":
            check(md.get("name") == ns_name, f"{what} is the release's namespace", md.get("name"))
        else:
            check(md.get("namespace") == ns_name and md.get("name") == own_name,
                  f"{what} is {own_name} in namespace {ns_name}",
                  f"name {md.get('name')}, namespace {md.get('namespace')}")
        check(subset(selector_labels, labels) and labels.get("app.kubernetes.io/managed-by")
              and labels.get("helm.sh/chart", "").startswith(f"{CHART}-")
              and labels.get("app.kubernetes.io/version"),
              f"{what} has the chart's labels", f"{labels}")

    ns = one("Namespace")
    if ns:
        check(ns.get("metadata", {}).get("labels", {}).get("pod-security.kubernetes.io/enforce")
              == "privileged", "Namespace admits privileged pods",
              "pod-security.kubernetes.io/enforce must be privileged")

    ds = one("DaemonSet")
    sa = one("ServiceAccount")
    cm = one("ConfigMap")
    spec = ds.get("spec", {})
    tmpl = spec.get("template", {})
    pod = tmpl.get("spec", {})
    pod_labels = tmpl.get("metadata", {}).get("labels", {})
    pod_annotations = tmpl.get("metadata", {}).get("annotations", {})
    check(spec.get("selector") == {"matchLabels": selector_labels} and matches(spec["selector"], pod_labels),
          "DaemonSet selects its pods by the chart's selector labels",
          f"{spec.get('selector')} vs {pod_labels}")
    strategy = dict(v["updateStrategy"])
    if strategy["type"] != "RollingUpdate" or not strategy.get("rollingUpdate"):
        strategy.pop("rollingUpdate", None)
    check(spec.get("updateStrategy") == strategy, "DaemonSet: updateStrategy of the values",
          f"{spec.get('updateStrategy')} vs {strategy}")
    check(pod.get("hostPID") is True, "DaemonSet: hostPID", "must be true")
    dns = "ClusterFirstWithHostNet" if v["hostNetwork"] else "ClusterFirst"
    check(pod.get("hostNetwork") is v["hostNetwork"] and pod.get("dnsPolicy") == dns,
          f"DaemonSet: hostNetwork {str(v['hostNetwork']).lower()}, dnsPolicy {dns}",
          f"hostNetwork {pod.get('hostNetwork')}, dnsPolicy {pod.get('dnsPolicy')}")
    sav = v["serviceAccount"]
    if sav["create"]:
        check(pod.get("serviceAccountName") == sa.get("metadata", {}).get("name")
              and pod.get("automountServiceAccountToken") is False and sa.get("automountServiceAccountToken") is False,
              "DaemonSet uses the ServiceAccount, with no token", pod.get("serviceAccountName"))
        check(sa.get("metadata", {}).get("annotations", {}) == sav["annotations"],
              "ServiceAccount has serviceAccount.annotations", f"{sa.get('metadata')}")
    else:
        check(pod.get("serviceAccountName") == (sav["name"] or "default")
              and pod.get("automountServiceAccountToken") is False,
              f"DaemonSet uses ServiceAccount {sav['name'] or 'default'} (not created), with no token",
              pod.get("serviceAccountName"))
    check(pod.get("securityContext", {}) == v["podSecurityContext"], "pod securityContext is podSecurityContext",
          f"{pod.get('securityContext')}")
    check(pod.get("tolerations", []) == v["tolerations"], "DaemonSet: tolerations of the values",
          f"{pod.get('tolerations')}")
    check(pod.get("nodeSelector", {}) == v["nodeSelector"] and pod.get("affinity", {}) == v["affinity"],
          "DaemonSet: nodeSelector and affinity of the values", f"{pod.get('nodeSelector')} {pod.get('affinity')}")
    check(pod.get("priorityClassName", "") == v["priorityClassName"], "DaemonSet: priorityClassName of the values",
          f"{pod.get('priorityClassName')}")
    check(pod.get("imagePullSecrets", []) == v["imagePullSecrets"], "DaemonSet: imagePullSecrets of the values",
          f"{pod.get('imagePullSecrets')}")
    check(subset(v["podLabels"], pod_labels) and subset(v["podAnnotations"], pod_annotations),
          "pods carry podLabels and podAnnotations", f"{pod_labels} {pod_annotations}")
    containers = pod.get("containers", [])
    c = next((c for c in containers if c.get("name") == "sockwatch"), {})
    check(bool(c), "DaemonSet has the sockwatch container", "missing")
    check(pod_annotations.get("kubectl.kubernetes.io/default-container") == "sockwatch",
          "the sockwatch container is the pod's default", f"{pod_annotations}")
    app_version = yaml.load((REPO / "deploy/helm/sockwatch/Chart.yaml").read_text(), Loader=Loader)["appVersion"]
    image = f"{v['image']['repository']}:{v['image']['tag'] or app_version}"
    check(c.get("image") == image and c.get("imagePullPolicy") == v["image"]["pullPolicy"],
          f"container image {image}, pull policy {v['image']['pullPolicy']}",
          f"{c.get('image')} {c.get('imagePullPolicy')}")
    args = c.get("args", [])
    want_args = ["run", "--probe-mode", v["config"]["probeMode"], "--config", CONFIG_PATH,
                 "--listen", f"0.0.0.0:{port}"] + v["extraArgs"]
    check(args == want_args, f"container runs `sockwatch {' '.join(want_args)}`", f"args {args}")
    ports = {p.get("name"): p for p in c.get("ports", [])}
    check(ports.get("metrics", {}).get("containerPort") == port, f"container port metrics={port}",
          f"{ports}")
    for probe, path in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz"),
                        ("startupProbe", "/healthz")]:
        get = c.get(probe, {}).get("httpGet", {})
        check(get.get("path") == path and get.get("port") == "metrics",
              f"{probe} on {path}", f"{get}")
        timing = {k: x for k, x in c.get(probe, {}).items() if k != "httpGet"}
        check(timing == v[probe], f"{probe} timing of the values", f"{timing} vs {v[probe]}")
    env_list = c.get("env", [])
    env = {e.get("name"): e for e in env_list}
    node_name = env.get("NODE_NAME", {}).get("valueFrom", {}).get("fieldRef", {})
    check(node_name.get("fieldPath") == "spec.nodeName",
          "container gets NODE_NAME from spec.nodeName", f"env {env_list}")
    check(env.get("SOCKWATCH_LOG", {}).get("value") == v["logLevel"],
          f"container logs at SOCKWATCH_LOG={v['logLevel']}", f"env {env_list}")
    check(env.get("SOCKWATCH_LOG_FORMAT", {}).get("value") == v["logFormat"],
          f"container logs as SOCKWATCH_LOG_FORMAT={v['logFormat']}", f"env {env_list}")
    check(all(e in env_list for e in v["extraEnv"]), "container has extraEnv", f"env {env_list}")
    check(c.get("resources") == v["resources"], "container resources of the values", f"{c.get('resources')}")
    sc = c.get("securityContext", {})
    profile = v["securityProfile"]
    check(sc == deep_merge(SECURITY_CONTEXTS.get(profile, {}), v["securityContext"]),
          f"container securityContext of securityProfile={profile}, with securityContext over it", f"{sc}")

    # The configuration.
    cm_name = cm.get("metadata", {}).get("name")
    config_vols = [x for x in pod.get("volumes", []) if x.get("configMap", {}).get("name") == cm_name]
    check(len(config_vols) == 1, "DaemonSet mounts the ConfigMap", f"volumes {pod.get('volumes')}")
    mounts = {x["name"]: x for x in c.get("volumeMounts", [])}
    if config_vols:
        mnt = mounts.get(config_vols[0]["name"], {})
        key = CONFIG_PATH.rsplit("/", 1)[-1]
        check(CONFIG_PATH.startswith(mnt.get("mountPath", "?") + "/") and key in cm.get("data", {}),
              f"--config {CONFIG_PATH} is the ConfigMap's {key}",
              f"mount {mnt}, keys {list(cm.get('data', {}))}")
    text = cm.get("data", {}).get("sockwatch.toml", "")
    digest = hashlib.sha256(text.encode()).hexdigest()
    check(pod_annotations.get("checksum/config") == digest,
          "pods' checksum/config is the configuration's sha256 (a change rolls them)",
          f"{pod_annotations.get('checksum/config')} vs {digest}")
    try:
        toml = tomllib.loads(text)
        ok("sockwatch.toml parses")
    except tomllib.TOMLDecodeError as e:
        fail("sockwatch.toml parses", str(e))
        toml = {}
    keys, tables = config_keys()
    extra = {k for k in toml if k not in keys and k not in tables}
    extra |= {f"{t}.{k}" for t in tables for w in toml.get(t, []) for k in w if k not in tables[t]}
    check(not extra, f"sockwatch.toml has only keys {CONFIG_DOC.relative_to(REPO)} documents",
          f"unknown {sorted(extra)}")
    cfg = v["config"]
    guard = v.get("guard", {})
    want = {
        "scan_interval": cfg["scanInterval"],
        "drain_interval": cfg["drainInterval"],
        "takeover_window": cfg["takeoverWindow"],
        "events_filter": cfg["eventsFilter"],
        "live_capacity": cfg["liveCapacity"],
        "api_remote": cfg["apiRemote"],
        "require_all_hooks": cfg["requireAllHooks"],
        "guard": guard.get("policy", "off"),
        "guard_allow_comms": guard.get("allowComms", []),
        "guard_allow_cgroups": guard.get("allowCgroups", []),
    }
    got = {k: toml.get(k) for k in want}
    check(got == want, "sockwatch.toml has the values' settings", f"{got} vs {want}")
    want_watches = [{key: w[k] for k, key in WATCH_KEYS.items() if k in w} for w in v["watches"]]
    check(toml.get("watches", []) == want_watches, f"sockwatch.toml watches {want_watches or 'the whole node'}",
          f"{toml.get('watches')}")

    # Volumes.
    vols = {x["name"]: x for x in pod.get("volumes", [])}
    check(set(mounts) <= set(vols), "every volumeMount has its volume", f"{set(mounts) - set(vols)}")
    host_mounts = []
    pod_logs_dir = v.get("kubelet", {}).get("podLogsDir", POD_LOGS)
    for mname, mnt in mounts.items():
        host = vols.get(mname, {}).get("hostPath", {}).get("path")
        if host is None:
            continue
        if mnt.get("mountPath") == POD_LOGS:
            # Read by the agent, never reported: the kubelet's podLogsDir, wherever it is.
            check(host == pod_logs_dir, f"the kubelet's podLogsDir {pod_logs_dir} mounted at {POD_LOGS}",
                  f"hostPath {host}")
            host_mounts.append(POD_LOGS)
            continue
        check(mnt.get("mountPath") == host, f"hostPath {host} mounted at the same path (host paths are reported)",
              f"mountPath {mnt.get('mountPath')}")
        host_mounts.append(host.rstrip("/") or "/")
    for path in REQUIRED_MOUNTS:
        check(path in host_mounts, f"mounts the host's {path}", "missing")
    for path in UNUSED_MOUNTS:
        check(all(x.get("mountPath") != path for x in mounts.values()), f"does not mount {path}", "mounted")
    allow_cgroups = v.get("guard", {}).get("allowCgroups", []) + [c for w in v["watches"] for c in w.get("guardAllowCgroups", [])]
    cgroup2 = [x for x in mounts.values() if x.get("mountPath") == CGROUP2]
    if allow_cgroups:
        check(CGROUP2 in host_mounts and all(x.get("readOnly") for x in cgroup2),
              f"mounts the host's {CGROUP2} read-only (guard allow-lists name cgroups)", f"mounts {host_mounts}")
    else:
        check(not cgroup2, f"does not mount {CGROUP2} (no guard allow-list names a cgroup)", "mounted")
    for w in v["watches"]:
        p = w["path"].rstrip("/")
        check(any(p == h or p.startswith(h + "/") for h in host_mounts),
              f"watch {w['path']} is below a host mount", f"mounts {host_mounts}")

    # Scraping.
    svc = one("Service")
    if svc:
        check(svc.get("spec", {}).get("clusterIP") == "None", "Service is headless", f"{svc.get('spec')}")
        check(svc.get("spec", {}).get("selector") == selector_labels and subset(selector_labels, pod_labels),
              "Service selects the agent pods", f"{svc.get('spec', {}).get('selector')} vs {pod_labels}")
        check(svc.get("metadata", {}).get("annotations", {}) == m["service"]["annotations"],
              "Service has metrics.service.annotations", f"{svc.get('metadata')}")
        svc_ports = {p.get("name"): p for p in svc.get("spec", {}).get("ports", [])}
        check(svc_ports.get("metrics", {}).get("targetPort") == "metrics"
              and svc_ports["metrics"].get("port") == port, "Service port metrics → container port",
              f"{svc_ports}")
    svc_labels = svc.get("metadata", {}).get("labels", {})
    svc_ports = {p.get("name") for p in svc.get("spec", {}).get("ports", [])}
    for kind, endpoints_key, values_key, target_labels, target_ports in [
        ("ServiceMonitor", "endpoints", "serviceMonitor", svc_labels, svc_ports),
        ("PodMonitor", "podMetricsEndpoints", "podMonitor", pod_labels, set(ports)),
    ]:
        mon = one(kind)
        if not mon:
            continue
        mv = m[values_key]
        ms = mon.get("spec", {})
        target = "Service" if kind == "ServiceMonitor" else "agent pods"
        check(matches(ms.get("selector", {}), target_labels) and ms.get("selector", {}).get("matchLabels"),
              f"{kind} selects the {target}", f"{ms.get('selector')} vs {target_labels}")
        check(ms.get("namespaceSelector") == {"matchNames": [ns_name]}, f"{kind} looks in {ns_name}",
              f"{ms.get('namespaceSelector')}")
        check(target_labels.get(ms.get("jobLabel")) == "sockwatch", f"{kind} sets job=sockwatch",
              f"jobLabel {ms.get('jobLabel')}")
        eps = ms.get(endpoints_key, [])
        check(eps and all(e.get("port") in target_ports for e in eps),
              f"{kind} endpoints name {'Service' if kind == 'ServiceMonitor' else 'container'} ports", f"{eps}")
        check(all(e.get("interval") == mv["interval"] and e.get("scrapeTimeout") == mv["scrapeTimeout"]
                  for e in eps), f"{kind} scrapes every {mv['interval']}, timeout {mv['scrapeTimeout']}", f"{eps}")
        relabel = {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node", "action": "replace"}
        check(eps and all(e.get("relabelings") == [relabel] + mv["relabelings"] for e in eps),
              f"{kind} labels every series with its node, then the values' relabelings", f"{eps}")
        check(all(e.get("metricRelabelings", []) == mv["metricRelabelings"] for e in eps),
              f"{kind} has the values' metricRelabelings", f"{eps}")
        check(subset(mv["additionalLabels"], mon.get("metadata", {}).get("labels", {})),
              f"{kind} has additionalLabels", f"{mon.get('metadata', {}).get('labels')}")

    policy = one("NetworkPolicy")
    if policy:
        ps = policy.get("spec", {})
        check(ps.get("podSelector", {}).get("matchLabels") == selector_labels and subset(selector_labels, pod_labels),
              "NetworkPolicy selects the agent pods", f"{ps.get('podSelector')} vs {pod_labels}")
        want = {"from": [{"namespaceSelector": {"matchExpressions": [{
            "key": "kubernetes.io/metadata.name", "operator": "In",
            "values": v["networkPolicy"]["metricsFromNamespaces"]}]}}],
            "ports": [{"port": port, "protocol": "TCP"}]}
        check(ps.get("policyTypes") == ["Ingress"] and ps.get("ingress") == [want],
              f"NetworkPolicy admits port {port} only, from {v['networkPolicy']['metricsFromNamespaces']}",
              f"{ps}")

    rule = one("PrometheusRule")
    if rule:
        rv = m["prometheusRule"]
        check(subset(rv["additionalLabels"], rule.get("metadata", {}).get("labels", {})),
              "PrometheusRule has additionalLabels", f"{rule.get('metadata', {}).get('labels')}")
        rules = [r for g in rule.get("spec", {}).get("groups", []) for r in g.get("rules", [])]
        alerts = {r.get("alert") for r in rules if "alert" in r}
        want_alerts = ALERTS - set(rv["disabledAlerts"])
        check(alerts == want_alerts, f"PrometheusRule has exactly the sockwatch alerts but {rv['disabledAlerts']}",
              f"missing {want_alerts - alerts}, extra {alerts - want_alerts}")
        runbooks = f"{rv['runbookBaseURL'].rstrip('/')}/runbooks.md" if rv["runbookBaseURL"] else RUNBOOKS
        anchors = heading_anchors((REPO / RUNBOOKS).read_text())
        for r in rules:
            a = r.get("annotations", {})
            check(r.get("labels", {}).get("severity") in ("critical", "warning", "info")
                  and all(a.get(k, "").strip() for k in ("summary", "description", "runbook_url")),
                  f"alert {r.get('alert')}: severity, summary, description and runbook_url", f"{r}")
            check(subset(rv["ruleLabels"], r.get("labels", {})), f"alert {r.get('alert')}: has ruleLabels",
                  f"{r.get('labels')}")
            url = a.get("runbook_url", "")
            check(url == f"{runbooks}#{str(r.get('alert')).lower()}" and url.split("#")[-1] in anchors,
                  f"alert {r.get('alert')}: runbook_url is its section of {runbooks}",
                  f"{url!r}; sections {sorted(anchors)}")
            expr = r.get("expr", "")
            check(re.search(r"\bnode\b", expr) and "instance" not in expr,
                  f"alert {r.get('alert')}: keyed by node, not instance", expr)

    dash = one("DashboardsConfigMap")
    if dash:
        dv = v["dashboards"]
        md = dash.get("metadata", {})
        check(subset(dv["labels"], md.get("labels", {})) and md.get("annotations", {}) == dv["annotations"],
              "dashboards ConfigMap has dashboards.labels and annotations", f"{md}")
        want = {f.name: json.loads(f.read_text()) for f in sorted(DASHBOARDS.glob("*.json"))}
        got = {k: json.loads(x) for k, x in dash.get("data", {}).items()}
        check(want and got == want, f"dashboards ConfigMap carries dashboards/*.json ({', '.join(want)})",
              f"keys {sorted(got)}")
    return ds


def deploy_checks(deploy, ds, versions):
    applied = sorted(p.name for p in deploy.glob("*.yaml"))
    check(applied and applied[0].startswith("00-") and "namespace" in applied[0],
          "kubectl apply -f deploy/ creates the namespace first", f"files in order: {applied}")
    c = next((c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "sockwatch"), {})
    res = c.get("resources", {})
    check(all(k in res.get(t, {}) for t in ("requests", "limits") for k in ("cpu", "memory")),
          "container has cpu and memory requests and limits", f"{res}")
    patched = merge_patch(ds, load(deploy / "extras" / "privileged-patch.yaml")[0])
    psc = patched["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    check(psc == SECURITY_CONTEXTS["privileged"],
          "extras/privileged-patch.yaml gives the securityContext of securityProfile=privileged", f"{psc}")
    validate_k8s(patched, "DaemonSet + extras/privileged-patch.yaml", versions)

    dockerfile = (deploy / "Dockerfile").read_text()
    entry = re.search(r'^ENTRYPOINT \["([^"]+)"\]', dockerfile, re.M)
    check(entry and c.get("command", [None])[0] == entry.group(1),
          "DaemonSet command is the image's ENTRYPOINT", f"{entry and entry.group(1)} vs {c.get('command')}")
    cmd = re.search(r"^CMD (\[.*\])", dockerfile, re.M)
    check(cmd and json.loads(cmd.group(1)) == ["run", "--listen", f"0.0.0.0:{IMAGE_PORT}"],
          f"image runs `sockwatch run --listen 0.0.0.0:{IMAGE_PORT}`", cmd and cmd.group(1))
    check(re.search(rf"^EXPOSE {IMAGE_PORT}\b", dockerfile, re.M) is not None, f"image exposes {IMAGE_PORT}",
          "no EXPOSE")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--deploy", help="deploy/: the plain manifests and extras/")
    where.add_argument("--rendered", help="a directory of rendered YAML files, or a multi-document stream (- for stdin)")
    p.add_argument("--release", required=True, help="RELEASE.json from `render.py template`")
    p.add_argument("--k8s-versions", default="1.30.0,1.37.0")
    p.add_argument("--crd-validator", help="npm prefix holding @kubernetes-models/prometheus-operator")
    args = p.parse_args()
    versions = args.k8s_versions.split(",")
    release = json.loads(pathlib.Path(args.release).read_text())
    schemas = pathlib.Path(__file__).resolve().parents[1] / "schemas"
    objs = []
    if args.deploy:
        deploy = pathlib.Path(args.deploy)
        patch_file = deploy / "extras" / "privileged-patch.yaml"
        for f in sorted(deploy.glob("*.yaml")) + sorted((deploy / "extras").glob("*.yaml")):
            if f != patch_file:
                objs += [(str(f.relative_to(deploy.parent)), d) for d in load(f)]
        alternatives = {"PodMonitor", "NetworkPolicy"}  # extras/podmonitor.yaml, networkpolicy.yaml
    else:
        path = pathlib.Path(args.rendered)
        if args.rendered == "-":
            objs = load_stream(sys.stdin.read(), "stdin")
        elif path.is_dir():
            for f in sorted(path.rglob("*.yaml")):
                objs += [(str(f.relative_to(path)), d) for d in load(f)]
        else:
            objs = load_stream(path.read_text(), str(path))
        alternatives = set()
    check(bool(objs), "objects to validate", "none found")
    validate_objects(objs, versions, schemas)
    ds = cross_checks(objs, release, alternatives)
    if args.deploy:
        deploy_checks(pathlib.Path(args.deploy), ds, versions)
    crds = [{"source": s, "object": d} for s, d in objs if d.get("apiVersion") == "monitoring.coreos.com/v1"]
    if args.crd_validator and crds:
        with tempfile.NamedTemporaryFile("w", suffix=".json") as tmp:
            json.dump(crds, tmp)
            tmp.flush()
            here = pathlib.Path(__file__).resolve().parent
            r = subprocess.run(["node", str(here / "validate-crds.mjs"), args.crd_validator, tmp.name])
            if r.returncode != 0:
                failures.append("@kubernetes-models/prometheus-operator validation")
    elif not args.crd_validator:
        print("note: --crd-validator not given: Prometheus Operator kinds checked against deploy/schemas only")
    print(f"validate: {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
