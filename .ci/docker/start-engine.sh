#!/usr/bin/env bash
# Starts a local Docker engine for the docker backend's tests, unless one
# already answers. Idempotent: safe to run before every test run.
#
# The engine runs without a bridge network, iptables rules, IP forwarding or
# masquerading, so no container can send traffic anywhere (the backend's
# sandboxes use network "none" anyway; this also keeps tests that opt into a
# network away from private address ranges).
#
# Env: DOCKERD_LOG (default /tmp/dockerd.log), DOCKER_WAIT_SECONDS (default 60).
set -euo pipefail

log=${DOCKERD_LOG:-/tmp/dockerd.log}
wait_s=${DOCKER_WAIT_SECONDS:-60}

# gVisor: Debian's runsc (20221219) starts only with --network=none on
# this kernel (its netstack setup fails otherwise; sandboxes have no
# network anyway), and applies the container's seccomp profile only with
# --oci-seccomp. Runtimes are read from daemon.json, which a running
# engine reloads on SIGHUP: no restart, no container disturbed.
register_runsc() {
	command -v runsc >/dev/null 2>&1 || return 0
	local conf=/etc/docker/daemon.json
	if [ -e "$conf" ] && ! grep -q '"runsc"' "$conf"; then
		echo "start-engine: $conf exists without runsc; register it by hand (see README, gVisor)" >&2
		return 0
	fi
	mkdir -p /etc/docker
	cat >"$conf" <<-EOF
	{
	  "runtimes": {
	    "runsc": {
	      "path": "$(command -v runsc)",
	      "runtimeArgs": ["--network=none", "--oci-seccomp"]
	    }
	  }
	}
	EOF
}
register_runsc

if docker info >/dev/null 2>&1; then
	if command -v runsc >/dev/null 2>&1 && ! docker info --format '{{json .Runtimes}}' | grep -q '"runsc"'; then
		kill -HUP "$(cat /var/run/docker.pid)"
		echo "start-engine: docker engine already running; reloaded to register runsc"
	else
		echo "start-engine: docker engine already running"
	fi
	exit 0
fi

if ! command -v dockerd >/dev/null 2>&1; then
	echo "start-engine: dockerd not installed (apt-get install -y docker.io)" >&2
	exit 1
fi

# A stale pid file from a killed engine makes dockerd refuse to start.
if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
	rm -f /var/run/docker.pid
fi

echo "start-engine: starting dockerd (log: $log)"
nohup dockerd --bridge=none --iptables=false --ip-forward=false --ip-masq=false \
	>"$log" 2>&1 </dev/null &

for _ in $(seq 1 $((wait_s * 4))); do
	if docker info >/dev/null 2>&1; then
		echo "start-engine: docker engine ready ($(docker version --format '{{.Server.Version}} API {{.Server.APIVersion}}'))"
		exit 0
	fi
	sleep 0.25
done
echo "start-engine: docker engine did not answer within ${wait_s}s; last log lines:" >&2
tail -n 30 "$log" >&2 || true
exit 1
