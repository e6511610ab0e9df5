#!/usr/bin/env bash
# Stops the CI cluster started by start.sh and undoes what it and the
# kubelet left on the host: pod processes and their containerd shims, the
# kubelet's mounts, the pods' network namespaces and veths, the kubepods
# cgroups in every hierarchy and the host firewall chains. Idempotent.
# Touches only what this cluster made: its own containerd (a socket and root
# of its own, not Docker's), processes by the pid files it wrote, and
# cgroups/mounts/netns under names only the kubelet and CRI use.
set -uo pipefail
. "$(dirname "$0")/env.sh"

ctr_() { ctr -a "$K8S_CONTAINERD_SOCK" -n k8s.io "$@"; }

stop_pid() { # name
	local f=$K8S_RUN/$1.pid pid
	[ -f "$f" ] || return 0
	pid=$(cat "$f")
	if kill -0 "$pid" 2>/dev/null; then
		kill "$pid" 2>/dev/null
		for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null
	fi
	rm -f "$f"
}

# The kubelet first, so it restarts nothing while we tear pods down.
stop_pid kube-scheduler
stop_pid kubelet
# Every container (pause containers too) of our containerd.
if [ -S "$K8S_CONTAINERD_SOCK" ]; then
	for id in $(ctr_ tasks ls -q 2>/dev/null); do
		ctr_ tasks kill -s SIGKILL "$id" >/dev/null 2>&1
	done
	sleep 0.5
	for id in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks delete -f "$id" >/dev/null 2>&1; done
	for id in $(ctr_ containers ls -q 2>/dev/null); do ctr_ containers delete "$id" >/dev/null 2>&1; done
fi
stop_pid kube-apiserver
stop_pid containerd
stop_pid etcd
# Processes still in the pod cgroups (a shim that lost its containerd).
for h in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/unified/kubepods; do
	[ -d "$h" ] || continue
	find "$h" -name cgroup.procs -exec cat {} + 2>/dev/null | while read -r pid; do kill -9 "$pid" 2>/dev/null; done
done
# containerd shims of our containerd (their command line names its socket).
for d in /proc/[0-9]*; do
	if tr "\0" " " 2>/dev/null <"$d/cmdline" | grep -q -- "-address $K8S_CONTAINERD_SOCK"; then
		kill -9 "${d#/proc/}" 2>/dev/null
	fi
done
# The kubelet's and containerd's mounts (pod volumes, the kubelet's root-dir
# bind mount, overlay rootfs, shm), deepest first.
for root in "$K8S_STATE/kubelet" "$K8S_STATE/containerd" "$K8S_RUN/containerd"; do
	awk -v r="$root" '$2 == r || index($2, r "/") == 1 {print $2}' /proc/self/mounts | sort -r |
		while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
done
# Pod network namespaces made by the CRI (cni-<uuid>); the veths go with them.
for ns in /run/netns/cni-*; do
	[ -e "$ns" ] || continue
	umount "$ns" 2>/dev/null || umount -l "$ns" 2>/dev/null
	rm -f "$ns"
done
# kubepods cgroups in every v1 hierarchy (and the unused v2 one), leaves first.
for h in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/unified/kubepods; do
	[ -d "$h" ] && find "$h" -depth -type d -exec rmdir {} + 2>/dev/null
done
# Host firewall chains (see start.sh).
for t in iptables ip6tables; do
	command -v $t >/dev/null || continue
	for pair in INPUT:SBXK8S-IN FORWARD:SBXK8S-FWD; do
		c=${pair%%:*} ch=${pair#*:}
		while $t -D "$c" -j "$ch" 2>/dev/null; do :; done
		$t -F "$ch" 2>/dev/null; $t -X "$ch" 2>/dev/null
	done
done
restore_sysctls
rm -rf "$K8S_RUN"
k8s_log "cluster stopped"
