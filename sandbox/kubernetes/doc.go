// Package kubernetes is sandboxkit's Kubernetes backend: one pod per
// sandbox, with sandboxkit's agent as the container's main process, spoken
// to over the pod's attach stream (stdin/stdout). Every command, file
// operation, bash session and Python cell then travels over that one
// stream to the resident agent, so a tool call costs what it costs inside
// the pod, not a `kubectl exec` (an exec is a round of API calls, a
// kubelet stream and a runc exec per command).
//
// It talks to the cluster with client-go, configured like kubectl:
// $KUBECONFIG or ~/.kube/config (its current context and namespace), or
// the in-cluster service account when running in a pod (WithKubeconfig and
// WithRESTConfig override). docs/kubernetes.md lists the RBAC it needs.
//
// # How the agent gets into the pod
//
// No agent image and no registry: the pod runs the user's image with a tiny
// POSIX shell bootstrap as its command (see bootstrap). Once the pod runs,
// the backend attaches and sends a header line and the static agent binary
// over the attach stream; the bootstrap writes it into an emptyDir of its
// own, and execs it (through python3, which first applies the per-sandbox
// rlimits and measures the network) as the container's main process. The
// image therefore needs /bin/sh with head, chmod and wc, and python3 for
// the Python kernel, the network measurement and the pids limit. Pods are
// pinned (nodeSelector kubernetes.io/arch) to nodes of the binary's
// architecture. The binary is the one given by WithAgentBinary or the
// "agent" option, else $SANDBOXKIT_AGENT, else a `CGO_ENABLED=0 go build`
// of cmd/sandboxkit-agent for this machine's architecture, once per
// process (development and tests, where a Go toolchain is present).
//
// # Threat model
//
// Code in the pod is hostile. The pod gets: a non-root uid of its own
// (runAsNonRoot; by default a uid picked for this sandbox alone from
// [2^30, 2^31), so sandboxes sharing a node never share a uid), every
// capability dropped, allowPrivilegeEscalation false, seccomp
// RuntimeDefault, a read-only root file system with memory-backed emptyDirs
// at /workspace (sizeLimit from Limits.DiskBytes: a tmpfs, so a hard quota)
// and /tmp, no service account token, no service links, no host
// namespaces, a memory limit and optionally a CPU limit, restartPolicy
// Never, and activeDeadlineSeconds as a hard cap on its life. CPU-time and
// file-size limits are per-process rlimits that the agent sets on each
// child (as on Docker). Kubernetes has no per-pod pids limit in the pod
// spec (only the node's podPidsLimit), so the pids limit is RLIMIT_NPROC
// on the sandbox's own uid, which the kernel counts node-wide per uid: it
// is a per-sandbox limit exactly because the uid is the sandbox's alone.
// With a fixed uid (WithUID) it is reported as not enforced.
//
// Network: unless network is allowed, a deny-all NetworkPolicy (ingress and
// egress) selects the pod, created before it. Whether it is enforced
// depends on the cluster's network plugin, so the backend measures it at
// every creation: from inside the pod, a TCP connection to the node's
// kubelet port (at the node's address and the pod's default gateway) must
// fail. If it connects, or is refused by the node (packets got out), the
// sandbox is refused with ISOLATION_UNAVAILABLE, unless the caller accepts
// that by name (WithUnenforcedNetworkAccepted, option
// acceptOpenNetwork=true), and then Info reports the network control as not
// enforced (package sandbox still refuses that through sandbox.New, which
// accepts an unenforced no-network only for tiers chosen with AllowWeaker;
// the acceptance serves the driver's own users, such as doctor). Egress allowed by name rides on the agent's stream and needs
// no pod network.
//
// Pause sends SIGSTOP to every process of the sandbox but the agent (one
// `kill -STOP -1` through pods/exec); Kubernetes has no freezer API.
//
// # Lifetime
//
// Close ends the stream and deletes the pod (grace 1 s) and its policy, and
// returns when the API server no longer has the pod, which the kubelet
// allows only after its containers are dead. The sandbox's TTL and Renew
// are enforced by package sandbox on the client side. A host that dies,
// even by SIGKILL, drops the attach connection: the container's stdin
// closes (stdinOnce), the agent exits and kills what it started, and the
// pod is not restarted, within seconds. If the connection is held open by
// a partitioned network instead, activeDeadlineSeconds (default 24 h)
// bounds the pod's life. GC removes leftover pods and policies by label.
package kubernetes
