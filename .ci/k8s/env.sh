# Shared settings of the CI cluster scripts (sourced, not run).
K8S_STATE=${SANDBOXKIT_K8S_STATE:-/var/lib/sandboxkit-k8s}   # etcd, containerd, kubelet, pki
K8S_RUN=${SANDBOXKIT_K8S_RUN:-/run/sandboxkit-k8s}           # sockets, pid files, configs
K8S_LOGS=${SANDBOXKIT_K8S_LOGS:-/tmp/sandboxkit-k8s}          # component logs
K8S_CACHE=${SANDBOXKIT_K8S_CACHE:-/var/cache/sandboxkit-k8s}  # built binaries
KUBE_VERSION=${KUBE_VERSION:-v1.37.2}
K8S_BIN=$K8S_CACHE/$KUBE_VERSION/bin
K8S_POD_CIDR=10.244.0.0/24
K8S_CONTAINERD_SOCK=$K8S_RUN/containerd.sock
K8S_ETCD_PORT=23790
K8S_API_PORT=6443
K8S_NAMESPACE=${SANDBOXKIT_K8S_NAMESPACE:-sandboxkit-test}
K8S_PAUSE_IMAGE=sandboxkit.local/pause:1
KUBECONFIG_ADMIN=$K8S_STATE/pki/admin.kubeconfig
export PATH="$K8S_BIN:/usr/local/go/bin:$PATH"
k8s_log() { echo "k8s: $*" >&2; }
# Host kernel tunables the kubelet changes at start (start.sh, stop.sh).
K8S_SYSCTLS="vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes"
restore_sysctls() {
	[ -s "$K8S_STATE/sysctl.orig" ] || return 0
	sed 's/ = /=/' "$K8S_STATE/sysctl.orig" | while read -r kv; do sysctl -q -w "$kv" >/dev/null 2>&1; done
}
