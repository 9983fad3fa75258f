"""Policies every rendered manifest keeps: hardened non-root containers with limits and probes,
an HA beat (2+ replicas, anti-affinity, PDB), no embedded beat in workers, Flower never without
authentication, network policies, and worker shutdown that outlasts the tasks it waits for."""

from __future__ import annotations

import pytest

from tests.deploy.manifests import (
    Obj,
    Rendered,
    all_targets,
    command_line,
    component,
    containers,
    pod_spec,
    render,
)

pytestmark = pytest.mark.usefixtures("k8s_tools")
TARGETS = all_targets()


def _pods(r: Rendered) -> list[Obj]:
    return [o for o in r.objects if pod_spec(o) is not None]


def _env(container: Obj) -> dict[str, str]:
    return {e["name"]: str(e.get("value", "")) for e in container.get("env", []) if "value" in e}


@pytest.mark.parametrize("target", TARGETS)
def test_every_container_runs_non_root_on_a_read_only_root_with_no_privileges(target: str) -> None:
    problems = []
    for obj in _pods(render(target)):
        pod = pod_spec(obj) or {}
        pod_ctx = pod.get("securityContext", {})
        for c in containers(obj):
            ctx = c.get("securityContext", {})
            where = f"{obj['kind']}/{obj['metadata']['name']}/{c['name']}"
            if not (ctx.get("runAsNonRoot") or pod_ctx.get("runAsNonRoot")):
                problems.append(f"{where}: runAsNonRoot is not true")
            if ctx.get("runAsUser", pod_ctx.get("runAsUser")) in (None, 0):
                problems.append(f"{where}: no non-zero runAsUser")
            if ctx.get("readOnlyRootFilesystem") is not True:
                problems.append(f"{where}: root filesystem is writable")
            if ctx.get("allowPrivilegeEscalation") is not False:
                problems.append(f"{where}: privilege escalation allowed")
            if "ALL" not in ctx.get("capabilities", {}).get("drop", []):
                problems.append(f"{where}: capabilities not all dropped")
        if pod.get("automountServiceAccountToken") is not False:
            problems.append(f"{obj['kind']}/{obj['metadata']['name']}: mounts a service token")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("target", TARGETS)
def test_every_container_has_cpu_and_memory_requests_and_limits(target: str) -> None:
    problems = []
    for obj in _pods(render(target)):
        for c in containers(obj):
            res = c.get("resources", {})
            for kind in ("requests", "limits"):
                missing = {"cpu", "memory"} - set(res.get(kind, {}))
                if missing:
                    problems.append(f"{obj['metadata']['name']}/{c['name']}: no {kind} {missing}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("target", TARGETS)
def test_every_long_running_container_has_a_liveness_probe(target: str) -> None:
    for obj in _pods(render(target)):
        if obj["kind"] in ("Job", "CronJob"):
            continue
        # init containers (git-sync) run to completion before the pod starts: no probes there
        for c in (pod_spec(obj) or {}).get("containers", []):
            assert "livenessProbe" in c, f"{obj['metadata']['name']}/{c['name']} has no probe"


@pytest.mark.parametrize("target", TARGETS)
def test_the_beat_runs_two_replicas_on_different_nodes_under_a_disruption_budget(
    target: str,
) -> None:
    r = render(target)
    beats = [o for o in r.of_kind("Deployment") if component(o) == "beat"]
    assert len(beats) == 1, f"{target}: expected one beat Deployment"
    beat = beats[0]
    assert beat["spec"]["replicas"] >= 2
    anti = (pod_spec(beat) or {}).get("affinity", {}).get("podAntiAffinity", {})
    terms = anti.get("requiredDuringSchedulingIgnoredDuringExecution", []) + [
        t["podAffinityTerm"]
        for t in anti.get("preferredDuringSchedulingIgnoredDuringExecution", [])
    ]
    pod_labels = beat["spec"]["template"]["metadata"]["labels"]
    assert any(
        t["topologyKey"] == "kubernetes.io/hostname"
        and t["labelSelector"]["matchLabels"].items() <= pod_labels.items()
        for t in terms
    ), f"{target}: beat pods have no hostname anti-affinity against each other"
    pdbs = [
        p
        for p in r.of_kind("PodDisruptionBudget")
        if p["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    ]
    assert len(pdbs) == 1, f"{target}: no PodDisruptionBudget covers the beat pods"
    assert pdbs[0]["spec"].get("minAvailable", 0) >= 1


@pytest.mark.parametrize("target", TARGETS)
def test_no_worker_runs_an_embedded_beat(target: str) -> None:
    for obj in _pods(render(target)):
        for c in containers(obj):
            argv = command_line(c)
            if "worker" in argv:
                assert not {"-B", "--beat"} & set(argv), f"{obj['metadata']['name']} runs -B"
                assert not any(a.startswith("-B") and len(a) > 2 and a[2] != "-" for a in argv)


@pytest.mark.parametrize("target", TARGETS)
def test_the_beat_is_the_only_scheduler_and_needs_no_writable_image_path(target: str) -> None:
    for obj in _pods(render(target)):
        for c in containers(obj):
            argv = command_line(c)
            if "beat" in argv:
                schedule = argv[argv.index("--schedule") + 1]
                mounts = [m["mountPath"] for m in c.get("volumeMounts", [])]
                assert any(schedule.startswith(m + "/") for m in mounts), schedule


def _secret_env(container: Obj) -> set[str]:
    """Variables the container gets from Secrets (secretKeyRef) or may get (envFrom secretRef)."""
    names = {
        e["name"] for e in container.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})
    }
    if any("secretRef" in src for src in container.get("envFrom", [])):
        names.add("*")
    return names


@pytest.mark.parametrize("target", TARGETS)
def test_flower_never_runs_without_authentication(target: str) -> None:
    r = render(target)
    flowers = [(o, c) for o in _pods(r) for c in containers(o) if "flower" in command_line(c)]
    if target.endswith("minimal-values.yaml"):
        assert not flowers
        return
    assert flowers, f"{target}: no Flower container"
    for _obj, c in flowers:
        argv = command_line(c)
        # beatflow turns BEATFLOW_FLOWER_USER/PASSWORD into Flower's basic auth: a password on
        # the command line would show in `ps`, /proc and the pod spec.
        assert not [a for a in argv if "auth" in a or "PASSWORD" in a], argv
        assert "BEATFLOW_FLOWER_PASSWORD" in _secret_env(c), "Flower's password from a Secret"
        assert "FLOWER_UNAUTHENTICATED_API" not in _env(c)
        # its memory bound comes from BEATFLOW_FLOWER_MAX_TASKS: a --max_tasks flag would win
        assert not [a for a in argv if a.startswith("--max_tasks")], argv
        if not target.startswith("k8s"):  # Helm: flower.maxTasks becomes the setting
            assert _env(c)["BEATFLOW_FLOWER_MAX_TASKS"].isdigit(), _env(c)


@pytest.mark.parametrize("target", TARGETS)
def test_the_web_ui_runs_behind_its_login_with_secrets_from_the_environment(target: str) -> None:
    r = render(target)
    webs = [
        (o, c)
        for o in _pods(r)
        for c in containers(o)
        if command_line(c)[:2] == ["beatflow", "web"]
    ]
    if target.endswith("minimal-values.yaml"):
        assert not webs
        return
    assert webs, f"{target}: no web UI container"
    for obj, c in webs:
        argv = command_line(c)
        assert argv == ["beatflow", "web", "--port", "8080"]
        assert not [a for a in argv if "PASSWORD" in a or "TOKEN" in a], argv
        assert "BEATFLOW_WEB_PASSWORD" not in _env(c), "the password comes from a Secret"
        assert _secret_env(c), f"{obj['metadata']['name']}: no Secret for the web login"
        for probe in ("readinessProbe", "livenessProbe"):
            assert c[probe]["httpGet"]["path"] == "/healthz"
        assert {p["containerPort"] for p in c["ports"]} == {8080}
    if not r.of_kind("NetworkPolicy"):
        return  # network policies switched off (networkPolicy.enabled=false)
    policy = [
        p
        for p in r.of_kind("NetworkPolicy")
        if p["spec"]["podSelector"]["matchLabels"].get("app.kubernetes.io/component") == "web"
    ]
    assert policy, f"{target}: no NetworkPolicy for the web UI"
    assert {p["port"] for rule in policy[0]["spec"]["ingress"] for p in rule["ports"]} == {8080}


@pytest.mark.parametrize("target", TARGETS)
def test_worker_shutdown_outlasts_the_tasks_it_waits_for(target: str) -> None:
    r = render(target)
    config = r.config()
    workers = [o for o in r.of_kind("Deployment") if component(o) == "worker"]
    assert workers
    for obj in workers:
        c = (pod_spec(obj) or {})["containers"][0]  # the worker (sidecars come after it)
        env = {**config, **_env(c)}
        soft, hard = int(env["BEATFLOW_TASK_SOFT_TIME_LIMIT"]), int(env["BEATFLOW_TASK_TIME_LIMIT"])
        argv = command_line(c)
        shutdown = next(
            float(a.split("=", 1)[1]) for a in argv if a.startswith("worker.soft_shutdown_timeout=")
        )
        grace = (pod_spec(obj) or {})["terminationGracePeriodSeconds"]
        name = obj["metadata"]["name"]
        assert env.get("REMAP_SIGTERM") == "SIGQUIT", f"{name}: SIGTERM skips the soft shutdown"
        assert soft < hard <= shutdown, f"{name}: soft shutdown {shutdown}s < time limit {hard}s"
        assert grace >= shutdown + 15 > soft + 15, f"{name}: grace {grace}s cuts the shutdown short"
        assert int(config["BEATFLOW_VISIBILITY_TIMEOUT"]) > hard, (
            f"{name}: redelivered while running"
        )


@pytest.mark.parametrize("target", TARGETS)
def test_long_task_workers_do_not_prefetch(target: str) -> None:
    r = render(target)
    config = r.config()
    for obj in r.of_kind("Deployment"):
        if component(obj) != "worker":
            continue
        env = {**config, **_env(next(containers(obj)))}
        if int(env["BEATFLOW_TASK_SOFT_TIME_LIMIT"]) >= 600:
            assert env.get("BEATFLOW_WORKER_DISABLE_PREFETCH") == "true", obj["metadata"]["name"]


@pytest.mark.parametrize("target", [t for t in TARGETS if not t.endswith("ingress-values.yaml")])
def test_ingress_to_beatflow_pods_is_denied_unless_allowed(target: str) -> None:
    r = render(target)
    policies = r.of_kind("NetworkPolicy")
    deny = [
        p
        for p in policies
        if p["spec"]["policyTypes"] == ["Ingress"]
        and "ingress" not in p["spec"]
        and p["spec"]["podSelector"]["matchLabels"].get("app.kubernetes.io/name") == "beatflow"
    ]
    assert deny, f"{target}: no default-deny ingress policy for beatflow pods"


def test_in_cluster_redis_and_postgres_admit_only_labelled_clients() -> None:
    r = render("k8s/overlays/dev")
    for server, label, port in (
        ("redis", "beatflow.io/redis-client", 6379),
        ("postgres", "beatflow.io/postgres-client", 5432),
    ):
        policy = r.named("NetworkPolicy", f"beatflow-{server}")
        (rule,) = policy["spec"]["ingress"]
        assert rule["from"] == [{"podSelector": {"matchLabels": {label: "true"}}}]
        assert rule["ports"] == [{"port": port, "protocol": "TCP"}]
    clients = {
        o["metadata"]["name"]
        for o in _pods(r)
        if o["spec"]["template"]["metadata"]["labels"].get("beatflow.io/redis-client")
    }
    assert clients == {
        "beatflow-worker-default",
        "beatflow-worker-long",
        "beatflow-beat",
        "beatflow-flower",
        "beatflow-web",
        "beatflow-exporter",
    }
