package kubernetes

import (
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// Labels on every pod and NetworkPolicy this backend creates.
const (
	LabelSandboxkit = "sandboxkit"         // always "1"
	LabelID         = "sandboxkit.id"      // driver.Config.ID
	LabelOwner      = "sandboxkit.owner"   // driver.Config.Owner
	LabelCreated    = "sandboxkit.created" // creation time, Unix seconds
)

// kubeletPort is where a node's kubelet listens; the network measurement
// connects to it on the pod's node (see bootstrap).
const kubeletPort = 10250

// bootstrap is the container's command: a POSIX shell script that reads a
// header line ("SIZE HOST PORT") and then SIZE bytes of agent binary from
// its stdin (the attach stream), writes the binary into the agent's
// emptyDir, and execs it through bootPy, which measures the network,
// applies the per-sandbox rlimits and execs the agent as the container's
// main process. It needs sh, head and chmod in the image; python3 for the
// measurement and the pids limit (without it both are reported missing).
//
// `read` takes the header byte by byte (POSIX forbids it to read past the
// newline on a pipe) and `head -c` takes exactly SIZE bytes from GNU
// coreutils; a head that reads ahead (busybox) is safe too, because the
// host sends nothing after the binary until it has seen SBX-READY.
const bootstrap = `read -r n host port || exit 97
head -c "$n" > ` + agentPath + ` && chmod 0555 ` + agentPath + ` || exit 98
[ "$(wc -c < ` + agentPath + `)" = "$n" ] || exit 98
if command -v python3 >/dev/null 2>&1; then exec python3 -c "$SBX_BOOT" "$host" "$port" "$SBX_NPROC" "$SBX_NOFILE" ` + agentPath + `; fi
echo "SBX-NET unknown: no python3 in the image to measure it"; echo "SBX-NPROC none"; echo "SBX-SECCOMP none"; echo SBX-READY
exec ` + agentPath

// bootPy measures the network and applies rlimits, then becomes the agent.
//
// The measurement: a TCP connection from inside the pod to its node's
// kubelet port (HOST, when the node has an address) and to its default
// gateway (a node address with most CNIs). Both are reachable from an
// ordinary pod; a deny-all egress policy that is enforced makes them fail
// (timeout, or EHOSTUNREACH/ENETUNREACH from a firewall). A connection or
// a refusal (an RST from the node) means packets got out: the policy is
// not enforced. Nothing is sent to any other address.
//
// RLIMIT_NPROC counts the tasks of the uid node-wide; the backend sets it
// only when the uid is this sandbox's own (see sandboxUID), so it is a
// per-sandbox pids limit that covers the agent's threads too.
const bootPy = `import errno, os, resource, socket, struct, sys
host, port, nproc, nofile, agent = sys.argv[1:6]
def gateway():
    try:
        for line in open("/proc/net/route").read().splitlines()[1:]:
            f = line.split()
            if f[1] == "00000000" and f[2] != "00000000":
                return socket.inet_ntoa(struct.pack("<L", int(f[2], 16)))
    except Exception:
        pass
    return None
if host != "-":
    seen, verdict = [], None
    for h in [x for x in (host, gateway()) if x and x != "none"]:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(1.5)
        try:
            s.connect((h, int(port)))
            verdict = "open: connected to %s:%s" % (h, port)
        except ConnectionRefusedError:
            verdict = "open: %s:%s refused the connection (packets reached the node)" % (h, port)
        except socket.timeout:
            seen.append("%s:%s timed out" % (h, port))
        except OSError as e:
            seen.append("%s:%s %s" % (h, port, errno.errorcode.get(e.errno, e.errno)))
        finally:
            s.close()
        if verdict:
            break
    if not verdict:
        verdict = ("blocked: " + ", ".join(seen)) if seen else "unknown: no node address to measure against"
    print("SBX-NET " + verdict)
if nofile != "0":
    n = int(nofile)
    resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
    print("SBX-NOFILE %d" % n)
fsize = os.environ.get("SBX_FSIZE", "0")
if fsize != "0":
    n = int(fsize)
    resource.setrlimit(resource.RLIMIT_FSIZE, (n, n))
    print("SBX-FSIZE %d" % n)
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
flt = os.environ.get("SBX_SECCOMP", "")
if flt:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    prog = bytes.fromhex(flt)
    buf = ctypes.create_string_buffer(prog, len(prog))
    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    fp = Fprog(len(prog) // 8, ctypes.addressof(buf))
    # PR_SET_NO_NEW_PRIVS (already set by the runtime), PR_SET_SECCOMP.
    if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(22, 2, ctypes.byref(fp), 0, 0) != 0:
        print("SBX-SECCOMP failed: errno %d" % ctypes.get_errno())
    else:
        print("SBX-SECCOMP ok")
else:
    print("SBX-SECCOMP none")
if nproc != "0":
    n = int(nproc)
    resource.setrlimit(resource.RLIMIT_NPROC, (n, n))
    print("SBX-NPROC %d" % n)
else:
    print("SBX-NPROC none")
print("SBX-READY", flush=True)
# The bootstrap's variables are not the agent's business (its commands
# get the environment the client sends anyway).
os.execve(agent, [agent], {k: v for k, v in os.environ.items() if not k.startswith("SBX_")})
`

// objLabels are the ownership and gc labels of p's objects.
func objLabels(p *plan) map[string]string {
	return map[string]string{
		LabelSandboxkit: "1",
		LabelID:         p.cfg.ID,
		LabelOwner:      p.cfg.Owner,
		LabelCreated:    strconv.FormatInt(time.Now().Unix(), 10),
	}
}

// agentThreads is what the agent and the Go runtime need of the pids
// limit on top of the sandbox's own processes.
const agentThreads = 16

// nproc is the RLIMIT_NPROC the pod's processes get, 0 for none.
func nproc(p *plan) int {
	if !p.ownUID || p.cfg.Limits.Pids <= 0 {
		return 0
	}
	return p.cfg.Limits.Pids + agentThreads
}

// podSpec is the whole security and resource configuration of a sandbox
// pod. Each setting names what it prevents.
func podSpec(p *plan, ag *agentBin) *corev1.Pod {
	lim := p.cfg.Limits
	no, yes := false, true
	uid := p.uid
	deadline := int64(p.deadline / time.Second)
	grace := int64(1)
	ws := resource.NewQuantity(wsSize(lim), resource.BinarySI)
	tmp := resource.NewQuantity(tmpSize(lim), resource.BinarySI)
	agentSize := resource.NewQuantity(agentVolumeBytes, resource.BinarySI)
	res := corev1.ResourceRequirements{Limits: corev1.ResourceList{}, Requests: corev1.ResourceList{}}
	if lim.MemoryBytes > 0 {
		res.Limits[corev1.ResourceMemory] = *resource.NewQuantity(lim.MemoryBytes, resource.BinarySI)
	}
	if p.cpu != nil {
		res.Limits[corev1.ResourceCPU] = *p.cpu
	}
	if p.cpuRequest != nil {
		res.Requests[corev1.ResourceCPU] = *p.cpuRequest
	}
	if p.memRequest != nil {
		res.Requests[corev1.ResourceMemory] = *p.memRequest
	}
	sel := map[string]string{"kubernetes.io/os": "linux", "kubernetes.io/arch": ag.arch}
	for k, v := range p.nodeSelector {
		sel[k] = v
	}
	nofile := "0"
	if lim.OpenFiles > 0 {
		nofile = strconv.Itoa(lim.OpenFiles)
	}
	var pullSecrets []corev1.LocalObjectReference
	for _, s := range p.pullSecrets {
		pullSecrets = append(pullSecrets, corev1.LocalObjectReference{Name: s})
	}
	emptyDir := func(name string, medium corev1.StorageMedium, size *resource.Quantity) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: medium, SizeLimit: size}}}
	}
	var rc *string
	if p.runtimeClass != "" {
		rc = &p.runtimeClass
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: p.namespace, Labels: objLabels(p)},
		Spec: corev1.PodSpec{
			// One life: an agent that exits (its stream closed, the host
			// gone) is not restarted, so nothing runs without a client.
			RestartPolicy: corev1.RestartPolicyNever,
			// The outer bound on the pod's life, whatever happens to the
			// clients; the TTL is enforced by the client within it.
			ActiveDeadlineSeconds:         &deadline,
			TerminationGracePeriodSeconds: &grace,
			// No credentials of the cluster inside the sandbox.
			AutomountServiceAccountToken: &no,
			// No SERVICE_HOST/PORT variables naming the cluster's services.
			EnableServiceLinks: &no,
			// The node's namespaces stay the node's.
			HostNetwork: false, HostPID: false, HostIPC: false, HostUsers: nil,
			ShareProcessNamespace: &no,
			Hostname:              "sandbox",
			RuntimeClassName:      rc,
			NodeSelector:          sel,
			Tolerations:           p.tolerations,
			ImagePullSecrets:      pullSecrets,
			SecurityContext: &corev1.PodSecurityContext{
				// A fixed non-root uid, whatever the image says.
				RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid, FSGroup: &uid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Volumes: []corev1.Volume{
				// Memory-backed: the kernel enforces the size as a hard
				// quota (a disk-backed emptyDir's sizeLimit is only
				// checked now and then by the kubelet, which then evicts).
				emptyDir("workspace", corev1.StorageMediumMemory, ws),
				emptyDir("tmp", corev1.StorageMediumMemory, tmp),
				emptyDir("agent", corev1.StorageMediumDefault, agentSize),
			},
			Containers: []corev1.Container{{
				Name:            containerName,
				Image:           p.image,
				ImagePullPolicy: p.pull,
				Command:         []string{"/bin/sh", "-c", bootstrap},
				Env: []corev1.EnvVar{
					{Name: "SBX_BOOT", Value: bootPy},
					{Name: "SBX_NPROC", Value: strconv.Itoa(nproc(p))},
					{Name: "SBX_NOFILE", Value: nofile},
					{Name: "SBX_FSIZE", Value: strconv.FormatInt(max(lim.FileSizeBytes, 0), 10)},
					{Name: "SBX_SECCOMP", Value: seccompFilter(ag.arch)},
				},
				WorkingDir: workspacePath,
				// The agent's only channel is stdin/stdout over attach.
				// StdinOnce closes its stdin when our attach ends, so a
				// host that dies makes it exit.
				Stdin: true, StdinOnce: true, TTY: false,
				Resources: res,
				SecurityContext: &corev1.SecurityContext{
					// No capabilities: no mounts, raw sockets, chown, ptrace...
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					AllowPrivilegeEscalation: &no,
					Privileged:               &no,
					// The image cannot be modified; writes go to the emptyDirs.
					ReadOnlyRootFilesystem: &yes,
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "workspace", MountPath: workspacePath},
					{Name: "tmp", MountPath: "/tmp"},
					{Name: "agent", MountPath: agentDir},
				},
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
		},
	}
}

// networkPolicy denies every packet in and out of p's pod.
func networkPolicy(p *plan) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: p.namespace, Labels: objLabels(p)},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelSandboxkit: "1", LabelID: p.cfg.ID}},
			// Both directions listed, no rules: nothing is allowed.
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
}

func tmpSize(l driver.Limits) int64 {
	if l.TmpBytes > 0 {
		return l.TmpBytes
	}
	return defaultTmpBytes
}

func wsSize(l driver.Limits) int64 {
	if l.DiskBytes > 0 {
		return l.DiskBytes
	}
	return defaultWorkspaceBytes
}

// bootReport is what the bootstrap reported before the agent started.
type bootReport struct {
	net     netVerdict
	nproc   int    // RLIMIT_NPROC set, 0 for none
	nofile  int    // RLIMIT_NOFILE set, 0 for none
	fsize   int64  // RLIMIT_FSIZE set, 0 for none
	seccomp string // the extra filter installed, "" for none
}

// netVerdict is the network measurement's result.
type netVerdict struct {
	measured bool   // the measurement ran
	blocked  bool   // and found the network closed
	detail   string // what it saw
}

// isolation is the truthful report of what launch applied.
func (d *Driver) isolation(p *plan, pod *corev1.Pod, ag *agentBin, b bootReport) driver.Isolation {
	nv, nprocSet := b.net, b.nproc
	lim := p.cfg.Limits
	ctl := func(name string, on bool, how string) driver.Control {
		return driver.Control{Name: name, Enforced: on, Mechanism: how}
	}
	// ctlR is a control enforced by an rlimit, set by the agent on each
	// process it starts (byAgent) or by this backend before the agent.
	ctlR := func(name string, on bool, how string, r driver.Rlimit, byAgent bool) driver.Control {
		c := ctl(name, on, how)
		if on {
			c.Rlimit, c.SetByAgent = r, byAgent
		}
		return c
	}
	mech := "runc container (the cluster's default runtime)"
	switch p.tier {
	case driver.TierGVisor:
		mech = "gVisor (RuntimeClass " + p.runtimeClass + ", handler " + p.handler + ")"
	case driver.TierMicroVM:
		mech = "Kata VM (RuntimeClass " + p.runtimeClass + ", handler " + p.handler + ")"
	default:
		if p.runtimeClass != "" {
			mech = "RuntimeClass " + p.runtimeClass + " (handler " + p.handler + ")"
		}
	}
	network := "deny-all NetworkPolicy, measured closed at creation (" + nv.detail + ")"
	switch {
	case p.cfg.Network:
		network = "the cluster's pod network (allowed by config)"
	case !nv.blocked:
		network = "deny-all NetworkPolicy NOT enforced by this cluster (accepted by name): " + nv.detail
	}
	var gaps []string
	pids := ctlR("pids", nprocSet > 0, fmt.Sprintf("RLIMIT_NPROC %d for uid %d, which is this sandbox's alone (counts the agent's threads)", nprocSet, p.uid), driver.RlimitNPROC, false)
	if nprocSet == 0 {
		why := "no per-sandbox pids limit: the pod's limit is the node's podPidsLimit"
		if !p.ownUID {
			why += " (a fixed uid is shared with other pods, so RLIMIT_NPROC cannot serve)"
		} else if lim.Pids > 0 {
			why += " (no python3 in the image to set RLIMIT_NPROC)"
		}
		pids.Mechanism = why
		gaps = append(gaps, why)
	}
	// RLIMIT_FSIZE is set by the bootstrap before the agent starts, so
	// every command inherits it: set by the agent after a command started,
	// it came too late for a command that wrote at once (seen on Docker:
	// head -c 5000 > f, 0.3 ms, wrote past 1000). Without python3 in the
	// image the agent still sets it on each command, as before.
	fileSize := ctlR("file_size", lim.FileSizeBytes > 0, "RLIMIT_FSIZE set before the agent starts", driver.RlimitFSIZE, false)
	if lim.FileSizeBytes > 0 && b.fsize != lim.FileSizeBytes {
		fileSize = ctlR("file_size", true, "RLIMIT_FSIZE per process, set by the agent on each child (no python3 in the image to set it before the agent starts)", driver.RlimitFSIZE, true)
	}
	// The bootstrap sets RLIMIT_NOFILE only where python3 runs it, and
	// says so: without python3 it was not set, whatever was asked.
	openFiles := ctlR("open_files", lim.OpenFiles > 0 && b.nofile == lim.OpenFiles, "RLIMIT_NOFILE set before the agent starts", driver.RlimitNOFILE, false)
	if lim.OpenFiles > 0 && b.nofile != lim.OpenFiles {
		openFiles.Mechanism = "not enforced: no python3 in the image to set RLIMIT_NOFILE"
	}
	cs := []driver.Control{
		ctl("network", !p.cfg.Network && nv.blocked, network),
		ctl("filesystem", true, "read-only root file system; writable memory-backed emptyDirs /tmp and "+workspacePath),
		ctl("privileges", true, fmt.Sprintf("runAsNonRoot uid %d, all capabilities dropped, allowPrivilegeEscalation false, no service account token", p.uid)),
		ctl("syscalls", true, seccompMechanism(b.seccomp)+"; "+mech),
		ctl("processes_visible", true, "private pid namespace (agent is PID 1), no host namespaces"),
		ctl("signals", true, "private pid namespace: no host or other pod's process can be named"),
		ctl("ipc", true, "pod ipc and uts namespaces"),
		ctl("pause", true, "SIGSTOP to every process of the sandbox but the agent (kill -1 through pods/exec)"),
		ctl("lifetime", true, fmt.Sprintf("pod deleted on Close; agent exits when its attach stream closes (stdinOnce, restartPolicy Never); activeDeadlineSeconds %d as the hard cap", int64(p.deadline/time.Second))),
		ctl("memory", lim.MemoryBytes > 0, "container memory limit (cgroup), emptyDir files included"),
		pids,
		ctlR("cpu", lim.CPUSeconds > 0, "RLIMIT_CPU per process, set by the agent on each child", driver.RlimitCPU, true),
		fileSize,
		openFiles,
		ctl("tmp", true, fmt.Sprintf("memory-backed emptyDir /tmp sizeLimit %d", tmpSize(lim))),
		ctl("disk", true, fmt.Sprintf("memory-backed emptyDir %s sizeLimit %d (tmpfs: hard quota)", workspacePath, wsSize(lim))),
	}
	if p.cpu != nil {
		cs = append(cs, ctl("cpu_rate", true, "container CPU limit "+p.cpu.String()))
	}
	if b.seccomp == "" && p.tier < driver.TierGVisor {
		gaps = append(gaps, "only the runtime's default seccomp profile: it may allow ptrace and io_uring (no python3 in the image to add sandboxkit's filter, or a node architecture without one)")
	}
	gaps = append(gaps,
		"files in /tmp and "+workspacePath+" count against the memory limit",
		"the workspace lives in the pod: copy results out before Close")
	if !nv.blocked && !p.cfg.Network {
		gaps = append(gaps, "the cluster does not enforce NetworkPolicy: the sandbox can reach the pod network ("+nv.detail+")")
	}
	extra := map[string]string{
		"pod":           p.name,
		"namespace":     p.namespace,
		"node":          pod.Spec.NodeName,
		"image":         p.image,
		"uid":           strconv.FormatInt(p.uid, 10),
		"agent":         ag.source,
		"agent_sha256":  ag.sum,
		"network_probe": nv.detail,
	}
	if p.runtimeClass != "" {
		extra["runtime_class"] = p.runtimeClass
	}
	if !p.cfg.Network {
		extra["network_policy"] = p.name
	}
	if len(pod.Status.ContainerStatuses) > 0 {
		extra["image_id"] = pod.Status.ContainerStatuses[0].ImageID
	}
	return driver.Isolation{Tier: p.tier, Controls: cs, Gaps: gaps, WorkspacePath: workspacePath, Extra: extra}
}
