#!/usr/bin/env bash
# Builds the local test image for the docker backend from scratch, without
# any image registry: mmdebstrap writes a minimal Debian bookworm root file
# system as a tar stream and `docker import` turns it into an image.
#
# The image holds only what the tests run inside a sandbox: bash, coreutils,
# procps and python3 with numpy, pandas and matplotlib (rich-output tests),
# and the clients the egress tests drive through the sandbox's proxy: curl,
# pip and venv (pip installs a wheel from a local index the test serves).
# The sandboxkit agent is NOT in the image; the backend copies it into every
# container (see sandbox/docker's package doc).
#
# Cache-friendly: does nothing when the tag exists and was built by this
# version of the script (set SANDBOXKIT_IMAGE_REBUILD=1 to force a rebuild).
#
# Usage: build-image.sh [TAG]   (default sandboxkit/python:test)
# Env:   DEBIAN_MIRROR (default http://deb.debian.org/debian)
set -euo pipefail

tag=${1:-${SANDBOXKIT_DOCKER_IMAGE:-sandboxkit/python:test}}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

# The image records which recipe (this script) built it, so a machine that
# kept an image from an older recipe rebuilds instead of testing against it.
recipe=$(sha256sum "$0" | cut -c1-16)
if [ -z "${SANDBOXKIT_IMAGE_REBUILD:-}" ] &&
	[ "$(docker image inspect --format '{{index .Config.Labels "org.sandboxkit.recipe"}}' "$tag" 2>/dev/null)" = "$recipe" ]; then
	echo "build-image: $tag already exists (recipe $recipe)"
	exit 0
fi
if ! command -v mmdebstrap >/dev/null 2>&1; then
	echo "build-image: mmdebstrap not installed (apt-get install -y mmdebstrap)" >&2
	exit 1
fi

start=$(date +%s)
# Import under a temporary tag and move the real tag only on success: a
# failed mmdebstrap still hands docker import a truncated stream, and a
# broken image under the real tag would be "cached" forever.
tmp_tag="$tag-partial-$$"
cleanup() { docker rmi "$tmp_tag" >/dev/null 2>&1 || true; }
trap cleanup EXIT
# --variant=essential: only Essential:yes packages plus --include, no apt
# and no recommends. python3-fonttools (a hard dependency of matplotlib)
# needs "python3-scipy | python3-munkres": naming munkres keeps out scipy,
# and with it pythran, a C++ compiler and boost headers (the bulk of the
# build time: unpacking and byte-compiling them). Docs, man pages, locales
# and files no test needs are left out so the import stays small and
# fast; bundled test suites go after installation, since byte-compiling
# needs them.
mmdebstrap \
	--variant=essential \
	--include=bash,coreutils,procps,ca-certificates,curl,python3,python3-pip,python3-venv,python3-numpy,python3-pandas,python3-matplotlib,python3-munkres \
	--aptopt='APT::Install-Recommends "0";' \
	--dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-exclude=/usr/share/man/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' \
	--dpkgopt='path-exclude=/usr/share/info/*' \
	--dpkgopt='path-exclude=/usr/include/*' \
	--dpkgopt='path-exclude=/usr/lib/gcc/*' \
	--dpkgopt='path-exclude=/usr/libexec/gcc/*' \
	--dpkgopt='path-exclude=/usr/lib/*-linux-gnu/lib*san.so*' \
	--customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/usr/lib/python3/dist-packages/*/tests' \
	--format=tar \
	bookworm - "$mirror" |
	docker import \
		--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'ENV LANG=C.UTF-8' \
		--change 'LABEL org.sandboxkit.image=test' \
		--change "LABEL org.sandboxkit.recipe=$recipe" \
		--change 'CMD ["/bin/bash"]' \
		- "$tmp_tag" >/dev/null
docker tag "$tmp_tag" "$tag"

echo "build-image: built $tag in $(($(date +%s) - start))s ($(docker image inspect --format '{{.Size}}' "$tag") bytes)"
