#!/bin/bash
# The issue-22 benchmarks, each against its floor in the same run: the set
# the README's "Measured performance" table quotes. Not part of .ci/run (a
# shared CI machine measures scheduling, not sandboxkit); run it on an idle
# machine after .ci/run has set the machine up:
#
#   bash .ci/bench.sh [COUNT]        # default COUNT=3
#
# Docker rows need the engine and image .ci/docker/*.sh set up; Kubernetes
# rows run when SANDBOXKIT_K8S_KUBECONFIG names a cluster (.ci/k8s/start.sh).
set -u
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
n=${1:-3}
run() { # package, benchmark regexp, extra flags...
	local pkg=$1 re=$2
	shift 2
	echo "== $pkg -bench '$re'"
	go test -run '^$' -bench "$re" -count "$n" "$@" "$pkg" 2>&1 |
		grep -E '^(Benchmark|ok|FAIL|---)|ns/op' || true
}
uptime
run ./sandbox/local 'CreateAndFirstCommand|WarmCommand' -benchtime 50x
run ./sandbox 'FloorCommandRun|FloorRead1KB|FloorSearchGoSrc|PoolGetAndFirstCommand|PythonNewContext' -benchtime 20x
run ./internal/grep 'SearchGoSrc' -benchtime 5x
run ./adapters/mcp 'Call' -benchtime 2000x
run ./toolkit 'BenchmarkCall$' -benchtime 2000x
run ./sandbox/sandboxtest 'EgressDownload' -benchtime 20x
run ./agentloop 'RunInAFreshSandbox' -benchtime 20x
# The rest of the table: engines and tools against their own floors.
run ./sandbox/local/isolate 'BenchmarkCreate$' -benchtime 50x
run ./sandbox/pykernel 'RoundTrip|BenchmarkStart$' -benchtime 10x
run ./sandbox/shell 'EchoHi' -benchtime 50x
run ./toolkit 'BenchmarkReadFile$' -benchtime 200x
run ./cmd/sandboxkit 'RunCommandOverMCP' -benchtime 50x
run ./sandbox/fake '.' -benchtime 200x
if docker info >/dev/null 2>&1; then
	run ./sandbox/docker 'PoolGetAndFirstCommand|BenchmarkCommand$|PythonNewContext|EgressDownload' -benchtime 10x
	run ./sandbox/docker 'BenchmarkCreate$' -benchtime 5x
fi
if [ -n "${SANDBOXKIT_K8S_KUBECONFIG:-}" ]; then
	run ./sandbox/kubernetes 'PoolGetAndFirstCommand|BenchmarkCommand$' -benchtime 10x
	run ./sandbox/kubernetes 'BenchmarkCreate$' -benchtime 3x
fi
uptime
