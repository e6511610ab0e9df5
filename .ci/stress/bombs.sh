#!/usr/bin/env bash
# Runs every bomb probe of the escape suite (ForkBomb) N times (default 20)
# on every tier — local namespace, local landlock, Docker — while other
# suites load the machine: the local backend's contract suite runs in a
# loop in the background for as long as the probes run. Each probe run is
# a separate test process, so one failure or hang cannot hide the others.
# Prints one line per run (verdict and the bomb's peak process count) and
# a summary per tier; exits non-zero when any run failed.
#
# Usage: .ci/stress/bombs.sh [N]   (as root; Docker needs the engine and
# test image of .ci/docker; without an engine the Docker tier is reported
# as not run, which is a failure when SANDBOXKIT_REQUIRE names docker)
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/go/bin:$PATH
n=${1:-20}
out=$(mktemp -d)
load_pid=
cleanup() {
	[ -n "$load_pid" ] && kill -- "-$load_pid" 2>/dev/null
	rm -rf "$out"
}
trap cleanup EXIT

go test -c -o "$out/sandboxtest.test" ./sandbox/sandboxtest/ || exit 1
go test -c -o "$out/local.test" ./sandbox/local/ || exit 1
go test -c -o "$out/docker.test" ./sandbox/docker/ || exit 1
# The Docker sandboxes run this source's agent (not one cached elsewhere).
CGO_ENABLED=0 go build -o "$out/agent" ./cmd/sandboxkit-agent || exit 1
export SANDBOXKIT_AGENT=$out/agent

# The load: the local contract suite, over and over, in its own process
# group so that it ends with this script.
set -m
(cd sandbox/local && while :; do "$out/local.test" -test.count=1 -test.run '^TestContract$' >/dev/null 2>&1; done) &
load_pid=$!
set +m

docker_ok=1
docker info >/dev/null 2>&1 || docker_ok=0

failed=0
run_tier() { # name dir binary run-pattern pass-line
	local name=$1 dir=$2 bin=$3 pattern=$4 passline=$5 pass=0 peaks=
	for i in $(seq 1 "$n"); do
		local log="$out/$name-$i.log" start verdict peak ms
		start=$(date +%s%N)
		if (cd "$dir" && "$bin" -test.count=1 -test.timeout=5m -test.run "$pattern" -test.v) >"$log" 2>&1 &&
			grep -q -- "--- PASS: $passline" "$log"; then
			pass=$((pass + 1))
			verdict=pass
		else
			verdict="FAIL: $(grep -m1 -E 'escape.go|_test.go|panic|SKIP' "$log" | sed 's/^[[:space:]]*//')"
		fi
		peak=$(grep -o 'peaked at [0-9]*' "$log" | grep -o '[0-9]*$')
		peaks="$peaks ${peak:-?}"
		ms=$((($(date +%s%N) - start) / 1000000))
		printf 'bombs: %-9s run %2d/%d %6d ms peak %3s procs (limit 64) %s\n' "$name" "$i" "$n" "$ms" "${peak:-?}" "$verdict"
	done
	echo "bombs: $name: $pass of $n passed; peaks:$peaks"
	[ "$pass" -eq "$n" ] || failed=1
}

run_tier namespace sandbox/sandboxtest "$out/sandboxtest.test" '^TestEscapeLocalNamespace$/^Probes$/^ForkBomb$' 'TestEscapeLocalNamespace/Probes/ForkBomb'
run_tier landlock sandbox/sandboxtest "$out/sandboxtest.test" '^TestEscapeLocalLandlock$/^Probes$/^ForkBomb$' 'TestEscapeLocalLandlock/Probes/ForkBomb'
if [ "$docker_ok" = 1 ]; then
	run_tier docker sandbox/docker "$out/docker.test" '^TestEscape$/^Probes$/^ForkBomb$' 'TestEscape/Probes/ForkBomb'
else
	echo "bombs: docker: not run (no engine answers docker info)"
	case ",${SANDBOXKIT_REQUIRE:-}," in *,docker,*) failed=1 ;; esac
fi
exit $failed
