#!/bin/sh
# Builds the Kubernetes binaries the CI cluster runs (kube-apiserver,
# kube-scheduler, kubelet), and with SANDBOXKIT_K8S_KUBECTL=1 also kubectl
# (the `kubectl exec` benchmark's floor; ~4.5 min more cold, so CI, which
# runs no benchmarks, leaves it out) from the k8s.io/kubernetes module on the Go module proxy: no download
# site, no registry. They land in a cache directory keyed by version, so a
# later run on the same machine reuses them (and a warm Go build cache makes
# a rebuild fast).
#
# The module zip of k8s.io/kubernetes carries neither staging/ nor vendor/
# (measured for v1.37.2), so its go.mod's `./staging/src/k8s.io/X` replaces
# point at nothing: we build from a copy of the module directory with every
# such replace pointed at the published k8s.io/X v0.<minor>.<patch>.
# Cold, on a busy 2-core machine: kube-apiserver ~6 min, each of the others
# 1-2 min more (they share most packages with it).
#
# Usage: build.sh [CACHE_DIR]   (default /var/cache/sandboxkit-k8s)
# Prints the bin directory on success.
set -eu
export PATH="$PATH:/usr/local/go/bin"
KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"
CACHE="${1:-${SANDBOXKIT_K8S_CACHE:-/var/cache/sandboxkit-k8s}}"
BIN="$CACHE/$KUBE_VERSION/bin"
STAGING_VERSION="v0.${KUBE_VERSION#v1.}"
CMDS="kube-apiserver kubelet kube-scheduler"
[ "${SANDBOXKIT_K8S_KUBECTL:-}" = 1 ] && CMDS="$CMDS kubectl"

have_all() {
	for c in $CMDS; do [ -x "$BIN/$c" ] || return 1; done
}
if have_all; then
	echo "$BIN"
	exit 0
fi
mkdir -p "$BIN"
SRC="$CACHE/$KUBE_VERSION/src"
log() { echo "k8s-build: $*" >&2; }

if [ ! -f "$SRC/.prepared" ]; then
	log "downloading k8s.io/kubernetes@$KUBE_VERSION from the module proxy"
	dir=$(GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[ -d "$dir" ] || { log "module download failed"; exit 1; }
	rm -rf "$SRC"
	cp -r "$dir" "$SRC"
	chmod -R u+w "$SRC"
	# go.work (if shipped) names the missing staging dirs.
	rm -f "$SRC/go.work" "$SRC/go.work.sum"
	cd "$SRC"
	for m in $(sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => \./staging/src/.*#\1#p' go.mod); do
		go mod edit -replace="$m=$m@$STAGING_VERSION"
	done
	touch .prepared
fi
cd "$SRC"
export GOWORK=off GOFLAGS=-mod=mod
# kubectl cannot parse the default v0.0.0-master: stamp the real version.
LDF="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION \
-X k8s.io/component-base/version.gitMajor=1 \
-X k8s.io/component-base/version.gitMinor=$(echo "$KUBE_VERSION" | cut -d. -f2) \
-X k8s.io/component-base/version.gitTreeState=clean \
-X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION"
for c in $CMDS; do
	if [ ! -x "$BIN/$c" ]; then
		log "building $c (slow the first time)"
		t0=$(date +%s)
		CGO_ENABLED=0 go build -trimpath -ldflags "$LDF" -o "$BIN/$c.tmp" "./cmd/$c"
		mv "$BIN/$c.tmp" "$BIN/$c"
		log "built $c in $(( $(date +%s) - t0 ))s"
	fi
done
echo "$BIN"
