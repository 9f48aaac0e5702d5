#!/usr/bin/env bash
# Lints the chart and renders it with every value set in helm/creditflow/ci, then checks the
# output: every document parses as YAML, the dashboard is valid JSON whose panels use
# creditflow_ metrics, and every pod's terminationGracePeriodSeconds exceeds the shutdown
# timeout it passes. HELM=... picks the helm binary; by default helm v3.22.0 is built once with
# `go install` into a cache folder keyed by its version (CREDITFLOW_CACHE, default
# ~/.cache/creditflow) and reused by every later run.
set -euo pipefail
cd "$(dirname "$0")"
HELM_VERSION=v3.22.0
if [ -z "${HELM:-}" ]; then
  bin="${CREDITFLOW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/creditflow}/helm-$HELM_VERSION"
  if [ ! -x "$bin/helm" ]; then
    echo "building helm $HELM_VERSION once into $bin (later runs reuse it)" >&2
    mkdir -p "$bin"
    GOBIN="$bin" GOFLAGS="${GOFLAGS:-} -mod=mod" go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  fi
  HELM="$bin/helm"
fi
PY=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sets=("")
for f in creditflow/ci/*-values.yaml; do sets+=("$f"); done
for v in "${sets[@]}"; do
  args=()
  [ -n "$v" ] && args=(-f "$v")
  echo "== ${v:-default values}"
  $HELM lint --strict creditflow "${args[@]}" | tail -n 1
  $HELM template cf creditflow "${args[@]}" > "$tmp/out.yaml"
  "$PY" - "$tmp/out.yaml" <<'PYEOF'
import json, re, sys
text = open(sys.argv[1]).read()
docs = [d for d in re.split(r"^---\s*$", text, flags=re.M) if d.strip() and not all(
    l.startswith("#") or not l.strip() for l in d.splitlines())]
try:
    import yaml
except ImportError:
    yaml = None
kinds = []
for d in docs:
    if yaml:
        obj = yaml.safe_load(d)
        kinds.append(obj["kind"])
        spec = obj.get("spec", {})
        pod = spec.get("template", {}).get("spec")
        if pod:
            grace = pod["terminationGracePeriodSeconds"]
            for c in pod["containers"]:
                for a in c.get("args", []):
                    m = re.match(r"--shutdown-timeout=(\d+)s?$", a)
                    if m and not grace > int(m.group(1)):
                        sys.exit(f"{obj['metadata']['name']}: terminationGracePeriodSeconds {grace} <= shutdown timeout {m.group(1)}")
        if obj["kind"] == "ConfigMap" and "creditflow.json" in obj.get("data", {}):
            dash = json.loads(obj["data"]["creditflow.json"])
            exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
            bad = [e for e in exprs if "creditflow_" not in e]
            if bad or len(exprs) < 10:
                sys.exit(f"dashboard: {len(exprs)} queries, without creditflow_ metrics: {bad}")
        if obj["kind"] == "ConfigMap" and "config.json" in obj.get("data", {}):
            json.loads(obj["data"]["config.json"])
    else:
        kinds.append(re.search(r"^kind: (\S+)", d, re.M).group(1))
print(f"{len(docs)} objects: " + ", ".join(f"{k} x{kinds.count(k)}" for k in sorted(set(kinds)))
      + ("" if yaml else " (python3-yaml missing: YAML not parsed)"))
PYEOF
done
