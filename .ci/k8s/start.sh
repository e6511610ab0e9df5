#!/usr/bin/env bash
# Starts a single-node Kubernetes cluster on this machine for the
# kubernetes backend's tests, from parts that need no download site and no
# registry:
#
#   etcd            Debian's etcd-server (3.4), on 127.0.0.1:23790
#   kube-apiserver  built by build.sh from the k8s.io/kubernetes module
#   kube-scheduler  "
#   kubelet         "
#   containerd+runc Debian's (1.6 / 1.1), a containerd of our own (socket and
#                   root under $K8S_RUN / $K8S_STATE), never Docker's
#   pause image     a tiny static Go program (pause/) in a FROM-scratch image
#   sandbox image   sandboxkit/python:test, exported from Docker
#
# The pod network routes nowhere: a point-to-point CNI (Debian's
# containernetworking-plugins `ptp`: one veth per pod, no bridge between
# pods, no masquerade), IPv6 off inside pods, and host firewall chains that
# reject every packet from the pod range to the node (INPUT) and everything
# from or to it that would be forwarded (FORWARD). A pod can reach nothing
# but itself; no packet leaves the machine. The backend measures this at
# every sandbox's creation (a connection to the node's kubelet port must
# fail), which this cluster passes because of the firewall, not because of
# NetworkPolicy (there is no enforcer here).
#
# Measured facts this script relies on (this machine kind, Dec 2026):
#  - kube-apiserver bound to 127.0.0.1 refuses to start unless
#    --endpoint-reconciler-type=none;
#  - the kubelet refuses a loopback --node-ip, and a node without addresses
#    breaks exec/attach: node-ip stays unset and the apiserver reaches the
#    kubelet by Hostname (which resolves to 127.0.0.1);
#  - root lacks CAP_SYS_RESOURCE (a VM): runc fails to create the pod
#    sandbox ("can't get final child's PID from pipe: EOF", really a
#    negative oom_score_adj) unless containerd's CRI sets
#    restrict_oom_score_adj;
#  - the host is cgroup v1: kubelet v1.37 needs failCgroupV1: false, and it
#    writes KUBE-* iptables chains unless makeIPTablesUtilChains: false;
#  - containerd 1.6's CRI insists on an IP on the pod's interface (a
#    loopback-only CNI fails).
#
# Idempotent: does nothing when the cluster already answers and its node is
# Ready; otherwise cleans up (stop.sh) and starts afresh. Prints the admin
# kubeconfig's path.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"
mkdir -p "$K8S_STATE" "$K8S_RUN" "$K8S_LOGS"

# The API as the admin, with curl (kubectl is not needed to run the cluster).
api() { # METHOD PATH [JSON [CONTENT-TYPE]]
	curl -fsS --max-time 10 --cacert "$K8S_STATE/pki/ca.crt" --cert "$K8S_STATE/pki/admin.crt" --key "$K8S_STATE/pki/admin.key" \
		-X "$1" ${3:+-H "Content-Type: ${4:-application/json}" --data "$3"} "https://127.0.0.1:$K8S_API_PORT$2"
}
node_ready() {
	api GET "/api/v1/nodes/$(hostname)" | python3 -c 'import json, sys
c = [x for x in json.load(sys.stdin)["status"].get("conditions", []) if x["type"] == "Ready"]
sys.exit(0 if c and c[0]["status"] == "True" else 1)'
}
ctr_() { ctr -a "$K8S_CONTAINERD_SOCK" -n k8s.io "$@"; }

need_bin() {
	for c in kube-apiserver kube-scheduler kubelet; do
		[ -x "$K8S_BIN/$c" ] || { k8s_log "$K8S_BIN/$c missing: run .ci/k8s/build.sh first"; exit 1; }
	done
	for c in etcd containerd runc ctr openssl iptables curl python3; do
		command -v $c >/dev/null || { k8s_log "$c missing: apt-get install etcd-server containerd runc containernetworking-plugins openssl iptables curl python3"; exit 1; }
	done
	[ -x /usr/lib/cni/ptp ] || { k8s_log "/usr/lib/cni/ptp missing: apt-get install containernetworking-plugins"; exit 1; }
}

images() {
	# The pause image: a static binary in an otherwise empty image.
	if ! ctr_ images ls -q 2>/dev/null | grep -qx "$K8S_PAUSE_IMAGE"; then
		local d; d=$(mktemp -d)
		(cd "$here/../.." && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$d/pause" ./.ci/k8s/pause)
		tar -C "$d" -cf "$d/rootfs.tar" pause
		docker import --change 'ENTRYPOINT ["/pause"]' "$d/rootfs.tar" "$K8S_PAUSE_IMAGE" >/dev/null
		docker save "$K8S_PAUSE_IMAGE" | ctr_ images import - >/dev/null
		rm -rf "$d"
		k8s_log "imported $K8S_PAUSE_IMAGE"
	fi
	# The sandbox image, when Docker has it (build-image.sh), re-imported
	# when Docker's copy changed.
	local img=${SANDBOXKIT_K8S_IMAGE:-sandboxkit/python:test} id
	if id=$(docker image inspect --format '{{.Id}}' "$img" 2>/dev/null); then
		if [ "$(cat "$K8S_STATE/image.id" 2>/dev/null)" != "$img $id" ]; then
			docker save "$img" | ctr_ images import - >/dev/null
			echo "$img $id" >"$K8S_STATE/image.id"
			k8s_log "imported $img"
		fi
	else
		k8s_log "docker has no $img (run .ci/docker/build-image.sh): not imported"
	fi
}

if [ -s "$KUBECONFIG_ADMIN" ] && api GET /readyz >/dev/null 2>&1 && node_ready 2>/dev/null; then
	images
	k8s_log "cluster already running"
	echo "$KUBECONFIG_ADMIN"
	exit 0
fi
need_bin
"$here/stop.sh" 2>/dev/null || true
mkdir -p "$K8S_STATE" "$K8S_RUN" "$K8S_LOGS"
t0=$(date +%s.%N)
node=$(hostname)

# --- pki: a CA, serving and client certificates, service-account keys.
pki=$K8S_STATE/pki
if [ ! -s "$pki/admin.kubeconfig" ]; then
	rm -rf "$pki"; mkdir -p "$pki"
	openssl req -x509 -newkey rsa:2048 -nodes -keyout "$pki/ca.key" -out "$pki/ca.crt" -days 3650 -subj /CN=sandboxkit-ci-ca 2>/dev/null
	cert() { # name subject [san]
		openssl req -newkey rsa:2048 -nodes -keyout "$pki/$1.key" -out "$pki/$1.csr" -subj "$2" 2>/dev/null
		local ext="$pki/$1.ext"
		echo "extendedKeyUsage=serverAuth,clientAuth" >"$ext"
		[ -n "${3:-}" ] && echo "subjectAltName=$3" >>"$ext"
		openssl x509 -req -in "$pki/$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
			-out "$pki/$1.crt" -days 3650 -extfile "$ext" 2>/dev/null
	}
	cert apiserver /CN=kube-apiserver "IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:$node,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
	cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
	cert admin "/O=system:masters/CN=sandboxkit-ci-admin"
	cert kubelet "/O=system:nodes/CN=system:node:$node"
	cert scheduler /CN=system:kube-scheduler
	openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
	openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
	for u in admin kubelet scheduler; do
		cat >"$pki/$u.kubeconfig.tmp" <<KC
apiVersion: v1
kind: Config
clusters:
- name: ci
  cluster: {server: "https://127.0.0.1:$K8S_API_PORT", certificate-authority: "$pki/ca.crt"}
users:
- name: $u
  user: {client-certificate: "$pki/$u.crt", client-key: "$pki/$u.key"}
contexts:
- name: ci
  context: {cluster: ci, user: $u, namespace: $K8S_NAMESPACE}
current-context: ci
KC
		mv "$pki/$u.kubeconfig.tmp" "$pki/$u.kubeconfig"
	done
fi

start_bg() { # name cmd...
	local name=$1; shift
	setsid nohup "$@" >"$K8S_LOGS/$name.log" 2>&1 </dev/null &
	echo $! >"$K8S_RUN/$name.pid"
}
wait_for() { # what seconds cmd...
	local what=$1 secs=$2; shift 2
	for _ in $(seq 1 $((secs * 5))); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.2
	done
	k8s_log "$what did not come up within ${secs}s; logs in $K8S_LOGS"
	tail -n 30 "$K8S_LOGS"/*.log >&2 || true
	exit 1
}

# --- etcd (fresh data each start: no pods of an earlier run come back).
rm -rf "$K8S_STATE/etcd"
start_bg etcd etcd --name sbk --data-dir "$K8S_STATE/etcd" \
	--listen-client-urls "http://127.0.0.1:$K8S_ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$K8S_ETCD_PORT" \
	--listen-peer-urls http://127.0.0.1:23800 --initial-advertise-peer-urls http://127.0.0.1:23800 \
	--initial-cluster sbk=http://127.0.0.1:23800 --listen-metrics-urls '' --logger zap --log-level warn

# --- containerd: our own instance, Docker's untouched.
mkdir -p "$K8S_RUN/cni" "$K8S_STATE/containerd" "$K8S_STATE/cni"
cat >"$K8S_RUN/containerd.toml" <<TOML
version = 2
root = "$K8S_STATE/containerd"
state = "$K8S_RUN/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$K8S_CONTAINERD_SOCK"
[ttrpc]
  address = "$K8S_RUN/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$K8S_PAUSE_IMAGE"
  # root here lacks CAP_SYS_RESOURCE: a negative oom_score_adj fails runc.
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$K8S_RUN/cni"
TOML
# Point-to-point pod network, IPv6 off in pods (see the header).
cat >"$K8S_RUN/cni/10-sandboxkit.conflist" <<JSON
{"cniVersion": "0.4.0", "name": "sandboxkit-ptp", "plugins": [
  {"type": "ptp", "ipMasq": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$K8S_POD_CIDR"}]],
            "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$K8S_STATE/cni"}},
  {"type": "tuning", "sysctl": {"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"}}
]}
JSON
rm -rf "$K8S_STATE/cni"/*
start_bg containerd containerd --config "$K8S_RUN/containerd.toml"

# --- host firewall: nothing from a pod reaches the node or is forwarded.
# REJECT (admin-prohibited) rather than DROP, so a blocked connect fails
# at once with EHOSTUNREACH instead of timing out.
for t in iptables ip6tables; do
	$t -N SBXK8S-IN 2>/dev/null || $t -F SBXK8S-IN
	$t -N SBXK8S-FWD 2>/dev/null || $t -F SBXK8S-FWD
	$t -C INPUT -j SBXK8S-IN 2>/dev/null || $t -I INPUT 1 -j SBXK8S-IN
	$t -C FORWARD -j SBXK8S-FWD 2>/dev/null || $t -I FORWARD 1 -j SBXK8S-FWD
done
iptables -A SBXK8S-IN -s "$K8S_POD_CIDR" -j REJECT --reject-with icmp-admin-prohibited
iptables -A SBXK8S-FWD -s "$K8S_POD_CIDR" -j REJECT --reject-with icmp-admin-prohibited
iptables -A SBXK8S-FWD -d "$K8S_POD_CIDR" -j DROP
# The ptp host-side veths are the only veth* devices here (Docker runs
# without a bridge); IPv6 is off in pods, this is the second lock.
ip6tables -A SBXK8S-IN -i 'veth+' -j DROP
ip6tables -A SBXK8S-FWD -i 'veth+' -j DROP

wait_for etcd 30 curl -fsS "http://127.0.0.1:$K8S_ETCD_PORT/health"

# --- kube-apiserver.
start_bg kube-apiserver kube-apiserver \
	--etcd-servers "http://127.0.0.1:$K8S_ETCD_PORT" \
	--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$K8S_API_PORT" \
	--endpoint-reconciler-type none \
	--tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
	--client-ca-file "$pki/ca.crt" \
	--authorization-mode Node,RBAC \
	--service-account-issuer https://kubernetes.default.svc \
	--service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
	--service-cluster-ip-range 10.96.0.0/24 \
	--disable-admission-plugins ServiceAccount \
	--kubelet-preferred-address-types Hostname \
	--kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
	--profiling=false --enable-priority-and-fairness=false
wait_for kube-apiserver 120 api GET /readyz
k8s_log "apiserver ready after $(echo "$(date +%s.%N) - $t0" | bc 2>/dev/null || echo ?)s"

images

# --- kube-scheduler.
start_bg kube-scheduler kube-scheduler --kubeconfig "$pki/scheduler.kubeconfig" \
	--authentication-kubeconfig "$pki/scheduler.kubeconfig" --authorization-kubeconfig "$pki/scheduler.kubeconfig" \
	--leader-elect=false --bind-address 127.0.0.1 --secure-port 10259 --profiling=false

# --- kubelet.
mkdir -p "$K8S_STATE/kubelet"
cat >"$K8S_RUN/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# Only the apiserver (by hostname, 127.0.0.1) talks to the kubelet.
address: 127.0.0.1
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: "$pki/ca.crt"}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: "unix://$K8S_CONTAINERD_SOCK"
cgroupDriver: cgroupfs
failCgroupV1: false
makeIPTablesUtilChains: false
failSwapOn: false
# An outer bound per pod; the backend sets its own per-sandbox limit.
podPidsLimit: 4096
maxPods: 200
serializeImagePulls: false
# A busy shared CI machine must not evict test pods.
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
YAML
# The kubelet sets kernel tunables it likes on the host at start
# (vm.overcommit_memory=1, kernel.panic=10, kernel.panic_on_oops=1, ...;
# protectKernelDefaults only turns that into a refusal to start). This
# machine is shared: record the values first and put them back once the
# node is Ready (the kubelet sets them only at start); stop.sh does too.
[ -s "$K8S_STATE/sysctl.orig" ] || sysctl -e $K8S_SYSCTLS >"$K8S_STATE/sysctl.orig" 2>/dev/null || true
start_bg kubelet kubelet --config "$K8S_RUN/kubelet.yaml" --kubeconfig "$pki/kubelet.kubeconfig" \
	--root-dir "$K8S_STATE/kubelet" --v 1
wait_for "node $node Ready" 120 node_ready
restore_sysctls
# The kubelet registers the node with the not-ready taint, which only the
# node lifecycle controller (kube-controller-manager, not run here) lifts.
api PATCH "/api/v1/nodes/$node" '{"spec":{"taints":null}}' application/merge-patch+json >/dev/null
api GET "/api/v1/namespaces/$K8S_NAMESPACE" >/dev/null 2>&1 ||
	api POST /api/v1/namespaces "{\"metadata\":{\"name\":\"$K8S_NAMESPACE\"}}" >/dev/null
k8s_log "cluster ready in $(echo "$(date +%s.%N) - $t0" | bc 2>/dev/null || echo ?)s (kubeconfig $KUBECONFIG_ADMIN)"
echo "$KUBECONFIG_ADMIN"
