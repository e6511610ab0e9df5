#!/usr/bin/env bash
# Installs what the docker backend's tests need from Debian's packages:
# docker.io (engine, containerd, runc, CLI), mmdebstrap (builds the test
# image without a registry) and runsc (gVisor, the runtime the backend
# measures before trusting; start-engine.sh registers it). Idempotent:
# installs only what is missing.
set -euo pipefail

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
command -v runsc >/dev/null 2>&1 || need+=(runsc)
if [ ${#need[@]} -eq 0 ]; then
	echo "install-engine: docker.io, mmdebstrap and runsc already installed"
	exit 0
fi
echo "install-engine: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${need[@]}" >/dev/null
