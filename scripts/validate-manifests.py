#!/usr/bin/env python3
"""Validates deploy/kubernetes (run by scripts/validate-manifests.sh, in a
venv holding kubernetes-validate, which bundles the Kubernetes schemas and
so runs offline).

* every object of every YAML file (but kustomization.yaml and
  *.snippet.yaml) against the Kubernetes schemas, strictly (an unknown
  field fails); a CRD kind against its schema in deploy/kubernetes/schemas
  (ServiceMonitor); a kind with neither fails, never a silent pass;
* each kustomization.yaml lists exactly the object files of its folder;
* the Envoy snippet parses and defines the HTTP/2 `ratelimit` cluster;
* every Deployment's terminationGracePeriodSeconds covers its preStop
  sleep plus the gateway's shutdownGraceMs (from the ConfigMap) plus 5 s;
* the gateway's config template, its `@REDIS_URL@` filled in, passes
  `pressure check-config` (the binary in $PRESSURE_BIN, when set).
"""
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import jsonschema
import kubernetes_validate
import yaml

# 1.30: the oldest with the preStop `sleep` action the Deployments use;
# and the newest kubernetes-validate knows.
VERSIONS = os.environ.get("KUBERNETES_VERSIONS", f"1.30.0 {kubernetes_validate.latest_version()}").split()
ROOT = pathlib.Path(__file__).resolve().parent.parent / "deploy" / "kubernetes"
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor-monitoring-v1.json",
}
errors = []


def fail(where, what):
    errors.append(f"{where}: {what}")


def objects():
    for path in sorted(ROOT.rglob("*.yaml")):
        if path.name == "kustomization.yaml" or path.name.endswith(".snippet.yaml"):
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                yield path, doc


def validate(path, doc):
    rel = path.relative_to(ROOT)
    kind, api = doc.get("kind"), doc.get("apiVersion")
    name = f"{rel} {kind}/{doc.get('metadata', {}).get('name')}"
    crd = CRD_SCHEMAS.get((api, kind))
    if crd:
        schema = json.loads((ROOT / "schemas" / crd).read_text())
        for e in jsonschema.Draft7Validator(schema).iter_errors(doc):
            fail(name, f"{'.'.join(map(str, e.absolute_path))}: {e.message}")
        return name + " (CRD schema)"
    for version in VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            fail(name, f"no schema for {api} {kind} (add one to schemas/ and CRD_SCHEMAS)")
        except kubernetes_validate.ValidationError as e:
            fail(name, f"Kubernetes {version}: {'.'.join(map(str, e.path))}: {e.message}")
    return name + f" (Kubernetes {', '.join(VERSIONS)})"


def kustomizations():
    for k in sorted(ROOT.rglob("kustomization.yaml")):
        listed = set(yaml.safe_load(k.read_text()).get("resources", []))
        present = {p.name for p in k.parent.glob("*.yaml")
                   if p.name != "kustomization.yaml" and not p.name.endswith(".snippet.yaml")}
        if listed != present:
            fail(k.relative_to(ROOT), f"resources {sorted(listed)} but files {sorted(present)}")


def envoy_snippet():
    for s in sorted(ROOT.rglob("*.snippet.yaml")):
        doc = yaml.safe_load(s.read_text())
        clusters = {c["name"]: c for c in doc["static_resources"]["clusters"]}
        c = clusters.get("ratelimit")
        opts = (c or {}).get("typed_extension_protocol_options", {}).get(
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions", {})
        if not c or "http2_protocol_options" not in opts.get("explicit_http_config", {}):
            fail(s.relative_to(ROOT), "no `ratelimit` cluster speaking HTTP/2")


def grace_and_config(docs):
    template = None
    for path, doc in docs:
        if doc.get("kind") == "ConfigMap" and "gateway.json.template" in doc.get("data", {}):
            template = doc["data"]["gateway.json.template"]
    if template is None:
        fail("gateway", "no ConfigMap with gateway.json.template")
        return
    grace_ms = json.loads(template.replace("@REDIS_URL@", "redis://x"))["gateway"].get(
        "shutdownGraceMs", 30000)
    for path, doc in docs:
        if doc.get("kind") != "Deployment":
            continue
        spec = doc["spec"]["template"]["spec"]
        total = spec.get("terminationGracePeriodSeconds", 30)
        for c in spec["containers"]:
            sleep = (c.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0))
            needed = sleep + (grace_ms / 1000 if "gateway" in c.get("args", []) else 0) + 5
            if total < needed:
                fail(path.relative_to(ROOT),
                     f"terminationGracePeriodSeconds {total} < preStop {sleep} s"
                     f" + shutdownGraceMs + 5 s = {needed} s")
    binary = os.environ.get("PRESSURE_BIN")
    if not binary:
        print("validate-manifests: PRESSURE_BIN unset: the gateway config is not checked",
              file=sys.stderr)
        return
    with tempfile.TemporaryDirectory() as d:
        cfg = pathlib.Path(d) / "gateway.json"
        cfg.write_text(template.replace("@REDIS_URL@", "redis://:secret@redis:6379/0"))
        env = dict(os.environ, PRESSURE_ADMIN_TOKEN="check")
        r = subprocess.run([binary, "check-config", str(cfg)], env=env,
                           capture_output=True, text=True)
        if r.returncode != 0:
            fail("gateway/configmap.yaml", f"pressure check-config: {r.stderr.strip()}")
        else:
            print("ok   gateway/configmap.yaml gateway.json.template (pressure check-config)")


def main():
    docs = list(objects())
    for path, doc in docs:
        name = validate(path, doc)
        if not any(e.startswith(name.split(" (")[0]) for e in errors):
            print(f"ok   {name}")
    kustomizations()
    envoy_snippet()
    grace_and_config(docs)
    for e in errors:
        print(f"FAIL {e}", file=sys.stderr)
    print(f"validate-manifests: {len(docs)} objects, {len(errors)} problems", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
