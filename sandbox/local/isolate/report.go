//go:build linux

package isolate

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// Report says what this sandbox enforces and how, for Info().Isolation.
// Control names are those of driver.Control.
func (h *Handle) Report() driver.Isolation {
	s, p := h.spec, h.spec.Plan
	l := s.Limits
	iso := driver.Isolation{Tier: s.Tier, WorkspacePath: h.WorkspacePath(), HostWorkspace: s.HostWorkspace,
		Extra: map[string]string{"tmpdir": h.TmpDir(), "host_uid": strconv.Itoa(p.HostUID)}}
	add := func(name string, on bool, mech string) {
		iso.Controls = append(iso.Controls, driver.Control{Name: name, Enforced: on, Mechanism: mech})
	}
	// addRlimit reports a control enforced by a per-process rlimit:
	// byAgent when package sandbox must have the agent set it on each
	// command (nothing here sets it), else Enter set it on the agent and
	// every process inherits it.
	addRlimit := func(name string, mech string, r driver.Rlimit, byAgent bool) {
		iso.Controls = append(iso.Controls, driver.Control{Name: name, Enforced: true, Mechanism: mech, Rlimit: r, SetByAgent: byAgent})
	}
	ll := "no Landlock"
	if p.LandlockABI > 0 {
		ll = fmt.Sprintf("Landlock ABI %d", p.LandlockABI)
	}
	cg := func(dir, v1, v2 string) string {
		if h.cg == nil {
			return ""
		}
		if strings.Contains(dir, "/unified/") || dir == h.cg.v2 {
			return "cgroup v2 " + v2
		}
		return "cgroup v1 " + v1
	}
	ns := s.Tier == driver.TierNamespace

	switch {
	case s.Network:
		add("network", false, "host network shared (allowed by the caller)")
	case ns:
		add("network", true, "net namespace (only lo)")
	default:
		mech := "seccomp socket filter (AF_UNIX only)"
		if p.LandlockABI < 9 {
			mech = "seccomp: socket(2) refused for every family"
		}
		if p.LandlockABI >= 4 {
			mech += " + Landlock TCP bind/connect denied"
		}
		add("network", true, mech)
	}
	switch {
	case ns:
		add("unix_sockets", true, "mount namespace: no host socket is in the sandbox's view")
	case p.LandlockABI >= 9:
		add("unix_sockets", true, "Landlock ABI "+strconv.Itoa(p.LandlockABI)+" LANDLOCK_ACCESS_FS_RESOLVE_UNIX: connect() only to sockets in the workspace and TMPDIR")
	default:
		add("unix_sockets", true, fmt.Sprintf("seccomp: socket(AF_UNIX) refused, socketpair(2) for stream and seqpacket pairs only (Landlock ABI %d does not mediate connect() to a pathname socket; ABI 9 does). "+
			"Cost: no unix-socket server inside the sandbox — Python's multiprocessing.Manager and forkserver start method, tmux, syslog fail with EACCES; multiprocessing's default fork start method, Pool, Queue, Pipe and asyncio subprocesses work", p.LandlockABI))
	}
	if ns {
		add("filesystem", true, "mount namespace + pivot_root: read-only recursive binds (mount_setattr) of "+
			strings.Join(s.readOnlyPaths(), " ")+"; workspace read-write at /workspace; "+ll)
		add("tmp", true, fmt.Sprintf("tmpfs size=%d at /tmp", s.tmpBytes()))
		add("processes_visible", true, "pid namespace with its own /proc")
		add("signals", true, "pid namespace")
		add("ipc", true, "ipc and uts namespaces")
		add("privileges", true, fmt.Sprintf("user namespace (uid 0 inside = host uid %d); capabilities, bounding and ambient sets empty; SECBIT_NOROOT locked; no_new_privs", p.HostUID))
	} else {
		add("filesystem", true, ll+": read-only "+strings.Join(s.readOnlyPaths(), " ")+"; read-write workspace and TMPDIR only")
		add("tmp", true, "private TMPDIR "+p.TmpDir+" (no size limit)")
		add("processes_visible", false, "host processes visible (no pid namespace)")
		if p.LandlockABI >= 6 {
			add("signals", true, "Landlock signal scope")
		} else {
			add("signals", false, "host processes of the same uid can be signalled")
		}
		who := "host uid " + strconv.Itoa(p.HostUID)
		add("privileges", true, "capabilities dropped; no_new_privs; runs as "+who)
		add("ipc", true, "seccomp: System V IPC and POSIX message queue calls refused (no ipc namespace: they would reach the host's); POSIX shared memory in /dev/shm is outside Landlock's rules")
	}
	add("syscalls", true, fmt.Sprintf("seccomp deny-list (%d syscalls EPERM, clone namespace flags EPERM, clone3 ENOSYS, %s syscalls only)", deniedOn(runtime.GOARCH), runtime.GOARCH))

	switch {
	case l.MemoryBytes <= 0:
		add("memory", false, "no limit requested")
	case p.MemoryCgroup:
		add("memory", true, cg(h.cg.memory, "memory.limit_in_bytes", "memory.max")+"="+strconv.FormatInt(l.MemoryBytes, 10))
	default:
		addRlimit("memory", "RLIMIT_AS (fallback, per command)="+strconv.FormatInt(l.MemoryBytes, 10), driver.RlimitAS, true)
	}
	switch {
	case l.Pids <= 0:
		add("pids", false, "no limit requested")
	case p.PidsCgroup && p.CommandsCgroup:
		add("pids", true, fmt.Sprintf("cgroup v1 pids.max=%d for the commands (a child cgroup every command is born in); the agent's own threads have %d more", l.Pids, AgentTaskReserve))
	case p.PidsCgroup:
		add("pids", true, cg(h.cg.pids, "pids.max", "pids.max")+"="+strconv.Itoa(l.Pids))
	case p.NprocShared:
		add("pids", false, "not enforced: the sandbox runs as the host user (uid "+strconv.Itoa(p.HostUID)+"), whose own processes RLIMIT_NPROC would count as well; a pids cgroup, or starting as root (a dedicated uid), enforces it")
	case ns:
		addRlimit("pids", "RLIMIT_NPROC (fallback, counts the processes of every sandbox on this workspace)="+strconv.Itoa(l.Pids), driver.RlimitNPROC, false)
	default:
		addRlimit("pids", "RLIMIT_NPROC (fallback, counts every process of "+strconv.Itoa(p.HostUID)+")="+strconv.Itoa(l.Pids), driver.RlimitNPROC, false)
	}
	if l.CPUSeconds > 0 {
		addRlimit("cpu", "RLIMIT_CPU per command="+strconv.Itoa(l.CPUSeconds)+"s (SIGKILL)", driver.RlimitCPU, true)
	} else {
		add("cpu", false, "no limit requested")
	}
	if l.FileSizeBytes > 0 {
		addRlimit("file_size", "RLIMIT_FSIZE="+strconv.FormatInt(l.FileSizeBytes, 10), driver.RlimitFSIZE, false)
	} else {
		add("file_size", false, "no limit requested")
	}
	addRlimit("open_files", "RLIMIT_NOFILE="+strconv.Itoa(s.openFiles()), driver.RlimitNOFILE, false)
	if l.DiskBytes > 0 {
		add("disk", true, fmt.Sprintf("tmpfs size=%d at /workspace (a copy of the host directory; SaveWorkspace writes it back)", l.DiskBytes))
	} else {
		add("disk", false, "no limit requested")
	}
	switch {
	case h.cg != nil && h.cg.mech.freezer == "v1":
		add("pause", true, "cgroup v1 freezer")
	case h.cg != nil && h.cg.mech.freezer == "v2":
		add("pause", true, "cgroup v2 cgroup.freeze")
	default:
		add("pause", true, "SIGSTOP/SIGCONT of every process (a process can observe SIGCONT)")
	}
	switch {
	case ns:
		add("lifetime", true, "PID 1 of the pid namespace killed by pidfd and Pdeathsig; the kernel kills the rest")
	case h.cg != nil && len(h.cg.all) > 0:
		add("lifetime", true, "cgroup emptied by KillAll; Pdeathsig kills the agent")
	default:
		add("lifetime", true, "agent is a subreaper; KillAll stops and kills its tree; Pdeathsig kills the agent")
	}

	iso.Gaps = append(iso.Gaps, "the host program's binary is readable inside (via /proc/1/exe): keep no secrets in it")
	if !ns {
		iso.Gaps = append(iso.Gaps, "host processes are visible (no pid namespace): use a host with user namespaces for the namespace tier")
		if p.LandlockABI < 6 {
			iso.Gaps = append(iso.Gaps, "host processes of the same uid can be signalled (Landlock below ABI 6 has no signal scope)")
		}
		iso.Gaps = append(iso.Gaps, "TMPDIR has no size limit")
		if p.NprocShared && !p.PidsCgroup {
			iso.Gaps = append(iso.Gaps, "no pids limit: the sandbox shares the host user's uid, and no pids cgroup is writable")
		}
	}
	if l.MemoryBytes > 0 && !p.MemoryCgroup {
		iso.Gaps = append(iso.Gaps, "memory is limited per process by RLIMIT_AS, which breaks runtimes that reserve address space (JVM, V8, Go); a writable memory cgroup avoids it")
	}
	if l.CPUSeconds > 0 {
		iso.Gaps = append(iso.Gaps, "the CPU limit is per command (and inherited by its children), not for the sandbox as a whole")
	}
	if h.cg != nil {
		iso.Extra["cgroups"] = strings.Join(h.cg.all, " ")
	}
	return iso
}
