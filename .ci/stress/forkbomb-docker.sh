#!/usr/bin/env bash
# Runs the escape suite's ForkBomb probe against the docker backend N times
# (default 20) in each build: with cgo (the sandboxes run the agent built
# from cmd/sandboxkit-agent) and with CGO_ENABLED=0 (the test binary is its
# own agent). Each run is a separate test process, so one run's failure or
# hang cannot hide the others. Prints one line per run and a summary per
# build; exits non-zero when any run failed.
#
# Usage: .ci/stress/forkbomb-docker.sh [N]    (needs the engine and test
# image of .ci/docker; other suites may load the machine meanwhile)
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/go/bin:$PATH
export SANDBOXKIT_REQUIRE=${SANDBOXKIT_REQUIRE:-docker}
n=${1:-20}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
failed=0
for build in cgo nocgo; do
	cgo=1
	[ "$build" = nocgo ] && cgo=0
	bin="$out/docker-$build.test"
	if ! CGO_ENABLED=$cgo go test -c -o "$bin" ./sandbox/docker/; then
		echo "forkbomb-docker: building the $build test binary failed" >&2
		exit 1
	fi
	pass=0
	for i in $(seq 1 "$n"); do
		log="$out/$build-$i.log"
		start=$(date +%s%N)
		if (cd sandbox/docker && "$bin" -test.count=1 -test.timeout=5m -test.run '^TestEscape$/^Probes$/^ForkBomb$' -test.v) >"$log" 2>&1 &&
			grep -q -- '--- PASS: TestEscape/Probes/ForkBomb' "$log"; then
			pass=$((pass + 1))
			verdict=pass
		else
			verdict="FAIL: $(grep -m1 -E 'escape.go|docker_test|Error|panic' "$log" | sed 's/^[[:space:]]*//')"
		fi
		ms=$((($(date +%s%N) - start) / 1000000))
		printf 'forkbomb-docker: %-5s run %2d/%d %6d ms %s\n' "$build" "$i" "$n" "$ms" "$verdict"
	done
	echo "forkbomb-docker: $build: $pass of $n passed"
	[ "$pass" -eq "$n" ] || failed=1
done
exit $failed
