"""The multi-node recipe (infra/k8s/multinode/, configs/gpu/qwen2.5-coder-7b-3node.yaml) renders
and agrees with itself: every manifest parses with the fields its kind needs; the learner Job's
torchrun group has as many ranks as the config's learner_gpus, its rendezvous address is pod 0
of the Job behind the headless Service; the vLLM StatefulSet has one pod per engine.vllm_url,
each URL naming one of its pods; both sides mount the shared volume the config's out_dir and
served_model_dir live on; the 8-GPU one-node recipe and the 3-node one validate as run configs."""

from pathlib import Path

import pytest
import yaml

from selfplay_core.config import load_config

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "infra" / "k8s" / "multinode"
CONFIG = ROOT / "configs" / "gpu" / "qwen2.5-coder-7b-3node.yaml"

# apiVersion and the keys a server requires of each kind the recipe uses
KINDS = {"Service": ("v1", ["spec.selector", "spec.ports"]),
         "Job": ("batch/v1", ["spec.template.spec.containers", "spec.template.spec.restartPolicy"]),
         "StatefulSet": ("apps/v1", ["spec.selector.matchLabels", "spec.serviceName",
                                     "spec.template.spec.containers"]),
         "PersistentVolumeClaim": ("v1", ["spec.accessModes", "spec.resources.requests.storage"])}


def get(doc: dict, dotted: str):
    for key in dotted.split("."):
        doc = doc[key]
    return doc


@pytest.fixture(scope="module")
def manifests() -> dict[tuple[str, str], dict]:
    out = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            kind = doc["kind"]
            assert kind in KINDS, (path.name, kind)
            version, required = KINDS[kind]
            assert doc["apiVersion"] == version, (path.name, kind)
            assert doc["metadata"]["name"]
            for key in required:
                get(doc, key)
            out[(kind, doc["metadata"]["name"])] = doc
    return out


def arg_after(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_every_manifest_parses_with_the_fields_of_its_kind(manifests):
    assert set(manifests) == {("Service", "selfplay-learner"), ("Job", "selfplay-learner"),
                              ("Service", "selfplay-vllm"), ("StatefulSet", "selfplay-vllm"),
                              ("PersistentVolumeClaim", "selfplay-runs")}
    for (kind, _), doc in manifests.items():
        if kind in ("Job", "StatefulSet"):
            labels = doc["spec"]["template"]["metadata"]["labels"]
            for c in doc["spec"]["template"]["spec"]["containers"]:
                assert c["image"] and c["name"]
                assert isinstance(c["resources"]["limits"]["nvidia.com/gpu"], int)
        if kind == "StatefulSet":
            assert doc["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_the_learner_group_has_the_configs_ranks_and_finds_rank_0(manifests):
    cfg = load_config(CONFIG)
    job = manifests[("Job", "selfplay-learner")]
    svc = manifests[("Service", "selfplay-learner")]
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    [c] = pod["containers"]
    assert c["command"] == ["torchrun"]
    args = c["args"]
    nodes, per_node = int(arg_after(args, "--nnodes")), int(arg_after(args, "--nproc_per_node"))
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == nodes
    assert per_node == c["resources"]["limits"]["nvidia.com/gpu"]  # one rank per GPU
    assert nodes * per_node == cfg.gpu.learner_gpus == 16 and cfg.gpu.distributed == "ddp"
    assert arg_after(args, "--node_rank") == "$(JOB_COMPLETION_INDEX)"  # pod i is node i
    # rank 0 lives on pod 0, named JOB-0 and resolvable as JOB-0.SUBDOMAIN via the Service
    assert pod["subdomain"] == svc["metadata"]["name"]
    assert arg_after(args, "--master_addr") == f"{job['metadata']['name']}-0.{svc['metadata']['name']}"
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"].items() <= job["spec"]["template"]["metadata"]["labels"].items()
    assert int(arg_after(args, "--master_port")) in [p["port"] for p in svc["spec"]["ports"]]
    # the run the ranks start is this config
    assert args[args.index("-m") + 1:args.index("-m") + 3] == ["selfplay_cli.main", "run"]
    # relative to the image's working directory, /src, which holds the repository (Dockerfile)
    assert (ROOT / arg_after(args, "--config")).resolve() == CONFIG.resolve()


def test_the_servers_are_the_configs_urls_and_share_the_run_volume(manifests):
    cfg = load_config(CONFIG)
    sts = manifests[("StatefulSet", "selfplay-vllm")]
    svc = manifests[("Service", "selfplay-vllm")]
    assert sts["spec"]["serviceName"] == svc["metadata"]["name"] and svc["spec"]["clusterIP"] == "None"
    n = sts["spec"]["replicas"]
    [port] = [p["port"] for p in svc["spec"]["ports"]]
    assert list(cfg.engine.vllm_urls) == [f"http://selfplay-vllm-{i}.selfplay-vllm:{port}"
                                          for i in range(n)]
    assert n == 8 and sts["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"][
        "nvidia.com/gpu"] == 1
    assert cfg.gpu.launch_server is False and cfg.gpu.weight_sync == "filesystem"
    assert cfg.gpu.server_url in cfg.engine.vllm_urls
    script = sts["spec"]["template"]["spec"]["containers"][0]["args"][0]
    assert cfg.engine.served_model_dir in script and "--served-copy" in script
    # the run folder and the served weights on the one shared (ReadWriteMany) volume
    pvc = manifests[("PersistentVolumeClaim", "selfplay-runs")]
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    for kind, name in (("Job", "selfplay-learner"), ("StatefulSet", "selfplay-vllm")):
        pod = manifests[(kind, name)]["spec"]["template"]["spec"]
        claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]
                  if "persistentVolumeClaim" in v}
        mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
        [mount] = [mounts[v] for v, claim in claims.items() if claim == "selfplay-runs"]
        assert Path(cfg.engine.served_model_dir).is_relative_to(mount)
        if kind == "Job":
            assert Path(cfg.out_dir).is_relative_to(mount)


def test_the_plan_of_the_3_node_recipe_fits():
    plan = load_config(CONFIG).resolved_plan()
    assert plan.fits, plan.notes
    assert [p["name"] for p in plan.processes if p["name"].startswith("learner-rank-")] == \
        [f"learner-rank-{r}" for r in range(16)]
    assert plan.batch["rollouts_per_learner_gpu"] == 512 // 16
