#!/usr/bin/env bash
# Runs the isolation suites as an unprivileged user (issue 3): the contract
# suite and the escape suite on the namespace tier, the escape suite on the
# landlock tier for the probes that tier claims, the isolate package's own
# tests, and the host-SIGKILL lifetime test. Called by .ci/run, as root, on a
# clean clone.
#
# Test binaries are built here as root (the user needs no Go toolchain or
# module cache) and run as the user, from a directory and with a TMPDIR it
# owns. SANDBOXKIT_REQUIRE=namespace,landlock turns "this tier is not
# available here" from a skip into a failure: a suite that quietly skipped
# would prove nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH

user=sandboxkit-ci
if ! id -u "$user" >/dev/null 2>&1; then
  useradd --create-home --shell /bin/bash "$user"
fi
uid=$(id -u "$user")
if [ "$uid" -eq 0 ]; then
  echo "unprivileged.sh: $user has uid 0" >&2
  exit 1
fi

# The user is in the docker group (issue 25), as most developers who run
# containers are: a socket owned by the user's own uid would prove nothing
# about group access. The landlock tier must keep the engine's socket (host
# root for this group) out of its sandboxes; the tests check that the user
# itself reaches it (SANDBOXKIT_REQUIRE=docker) and that nothing inside
# does. Like the user, the membership is this script's and stays (taking
# it back would break a concurrent run on a shared machine).
if getent group docker >/dev/null && [ -S /var/run/docker.sock ]; then
  id -nG "$user" | tr ' ' '\n' | grep -qx docker || gpasswd -a "$user" docker >/dev/null
else
  echo "unprivileged.sh: no docker group or no /var/run/docker.sock (start the engine first: .ci/docker/start-engine.sh)" >&2
  exit 1
fi

work=$(mktemp -d /tmp/sandboxkit-unprivileged-XXXXXX)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
mkdir "$work/tmp" "$work/run"
chown "$user:" "$work/tmp" "$work/run"

echo "== building test binaries (as root)"
for pkg in local local/isolate sandboxtest; do
  go test -race -c -o "$work/${pkg//\//-}.test" "./sandbox/$pkg"
done
chmod 755 "$work"/*.test

# run executes a test binary as the user with a clean environment: nothing
# of root's environment (HOME, GOPATH, tokens) reaches the user's run. The
# verbose output goes to a log that the skip check below reads.
log="$work/tests.log"
run() {
  local bin=$1
  shift
  echo "== as $user (uid $uid): $bin $*"
  (cd "$work/run" && runuser -u "$user" -- env -i \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME="/home/$user" TMPDIR="$work/tmp" LANG=C.UTF-8 \
    SANDBOXKIT_REQUIRE=namespace,landlock,docker \
    "$work/$bin" -test.v -test.timeout 20m "$@") >"$work/out" 2>&1 || {
    cat "$work/out"
    echo "unprivileged.sh: $bin failed as $user" >&2
    exit 1
  }
  grep -E '^(--- |ok|PASS|FAIL)' "$work/out" | grep -v -- '--- PASS' || true
  cat "$work/out" >>"$log"
}

# The user really is unprivileged: not root, no capability.
runuser -u "$user" -- sh -c 'test "$(id -u)" != 0 && grep -q "^CapEff:[[:space:]]*0000000000000000" /proc/self/status' || {
  echo "unprivileged.sh: $user is not unprivileged" >&2
  exit 1
}

run local.test -test.run 'TestContract|TestHostSIGKILLLeavesNoSandboxProcess|TestEndlessOutputForTenSeconds|TestLandlockTier'
run sandboxtest.test -test.run 'TestEscapeLocalNamespace|TestEscapeLocalLandlock'
run local-isolate.test

# A skip proves nothing. The only ones allowed: landlock-tier probes of
# controls that tier does not claim as this user (each names its gap), the
# two Prepare tests about what only root does, and the contract's full-disk
# test (mounting a small file system for the workspace needs root), and
# the cgroup-join test (an unprivileged user has no cgroup hierarchy to
# write, so there is nothing to join; root runs it in the main suite). The
# unix-socket probe is not among them: the landlock tier claims that
# control (issue 25).
skips=$(grep -E '^\s*--- SKIP' "$log" | grep -v -E -- '--- SKIP: (TestEscapeLocalLandlock/|TestPrepareAsRootRefusesAnUnreachableWorkspace|TestCleanupGivesTheWorkspaceBack|TestContract/Faults/FullDiskKeepsTheOldFile|TestLaunchJoinsEveryCgroup/)' || true)
skips+=$(grep -E -- '--- SKIP: TestEscapeLocalLandlock/(Probes/)?UnixSockets' "$log" || true)
if [ -n "$skips" ]; then
  echo "unprivileged.sh: tests skipped as $user:" >&2
  echo "$skips" >&2
  exit 1
fi
echo "== skipped as $user (allowed, each says why):"
grep -E -- '--- SKIP|not claimed by|does not claim them|admits this gap|only root|needs root' "$log" | sed 's/^ *//' || true
echo "== isolation suites passed as $user"
