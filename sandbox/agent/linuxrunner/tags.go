//go:build linux

package linuxrunner

import (
	"math/rand/v2"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Every command the agent starts is born with a tag, so that a timeout, a
// cancel or a job kill reaches every process it started — also the ones
// that left its process tree: a setsid daemon, a double fork whose middle
// process exited (its child is re-parented to the agent, PID 1 or a
// subreaper, where nothing says whose it was). Issue 17 saw both survive a
// timeout and Job.Kill, on every backend, until Close.
//
// The tag is the soft limit of RLIMIT_RTTIME, a unique number per command.
// Rlimits are inherited through fork and execve, survive setsid, and are
// invisible to a process unless it asks; RTTIME bounds only real-time
// scheduled tasks, which a sandbox cannot create (no CAP_SYS_NICE, RTPRIO
// 0), so the value changes nothing else. The runner's own clone
// (start_clone.go) sets the tag in the child before execve: the command
// cannot fork untagged, and the agent never carries a tag. Where os/exec
// starts commands (start_exec.go), the agent sets its own soft limit to
// the tag just before each fork (starts are serialised under
// procTable.mu, and rlimits are per process, whichever thread forks), so
// the child is born tagged, and puts its own limit back right after the
// fork, so that no agent carries a tag itself.
//
// Tags must be unique among every agent whose processes can see each other
// (the landlock and process tiers share the host's PID namespace; so do
// sandboxes served in one test binary). Every agent used to count up from
// tagBase and kept its last tag on itself: one sandbox's timeout SIGKILLed
// another sandbox's job with the same number, and its agent (found in
// session 5 when test binaries died of "signal: killed" while other suites
// ran). So each agent starts at a random point of a 2^62-wide range: two
// agents running a million commands each meet with a chance of ~1e-12.
// The kill finds the tag's processes by one prlimit read per process in
// /proc. A process can drop its tag only deliberately (ulimit -S -R, or
// setrlimit); then it is found only while it stays in the tree, and is
// killed at the latest when the sandbox closes.
//
// Measured here (2 cores, cgroup v1), per command: the tag is one
// setrlimit, ~1.3 µs (from Python; less from Go). The alternatives: a v1
// cgroup per command costs a mkdir, two migrations and an rmdir, ~0.42 ms,
// and exists only where the sandbox can write a cgroup hierarchy (not in a
// Docker container, nor in the landlock tier as an unprivileged user); a
// PID namespace per command needs CAP_SYS_ADMIN, which neither the
// namespace tier's agent nor a container has; clone3 into a v2 cgroup is
// refused by the sandbox's own seccomp filter (clone3 returns ENOSYS). The
// agent is also PID 1 or a child subreaper, so orphans stay its children
// and are killed by Close either way.
const tagResource = unix.RLIMIT_RTTIME

// tagBase is the first tag: far above any real-time budget a program would
// set for itself (2^40 µs, 12.7 days), so that a tag is never mistaken for
// a limit a process chose.
const tagBase = 1 << 40

// tagSpan bounds how far above tagBase an agent's first tag is drawn.
const tagSpan = 1 << 62

// tagger hands out tags; its methods run under procTable.mu.
type tagger struct {
	hard uint64 // the agent's hard RTTIME limit, kept as it is
	own  uint64 // the agent's own soft limit, put back after each fork
	next uint64
	off  bool // tagging is unavailable (a hard limit below tagBase)
}

func newTagger() tagger {
	var lim unix.Rlimit
	if err := unix.Prlimit(0, tagResource, nil, &lim); err != nil || lim.Max < tagBase+1<<33 {
		return tagger{off: true}
	}
	// Leave 2^32 tags of room above the start, below the hard limit.
	span := min(lim.Max-tagBase-1<<32, tagSpan)
	own := lim.Cur
	if own >= tagBase && own != unix.RLIM_INFINITY {
		// Inherited from a parent agent's fork window (an agent serving
		// in a process it started): not a limit anyone chose.
		own = unix.RLIM_INFINITY
		if lim.Max != unix.RLIM_INFINITY {
			own = lim.Max
		}
	}
	return tagger{hard: lim.Max, own: own, next: tagBase + rand.Uint64N(span)}
}

// arm gives the agent's next fork a new tag and returns it (0 when tags are
// unavailable). Call it under procTable.mu, right before the fork.
func (t *tagger) arm() uint64 {
	if t.off {
		return 0
	}
	t.next++
	if err := unix.Prlimit(0, tagResource, &unix.Rlimit{Cur: t.next, Max: t.hard}, nil); err != nil {
		return 0
	}
	return t.next
}

// take returns the next tag and the hard limit a child sets with it (0
// when tags are unavailable), for a child that sets its own limit before
// it execs: the agent's own limit is left alone. Call it under
// procTable.mu.
func (t *tagger) take() (tag, hard uint64) {
	if t.off {
		return 0, 0
	}
	t.next++
	return t.next, t.hard
}

// disarm puts the agent's own soft limit back after the fork that arm
// prepared (under procTable.mu, whether the fork succeeded or not), so the
// agent never carries a tag another agent's kill could match.
func (t *tagger) disarm() {
	if t.off {
		return
	}
	_ = unix.Prlimit(0, tagResource, &unix.Rlimit{Cur: t.own, Max: t.hard}, nil)
}

// tagged lists the processes carrying tag (zombies included: signalling
// them is harmless), found by one prlimit read per process in /proc.
// Processes of other users answer EPERM and are skipped.
func tagged(tag uint64) []int {
	if tag == 0 {
		return nil
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		var lim unix.Rlimit
		if unix.Prlimit(pid, tagResource, nil, &lim) == nil && lim.Cur == tag {
			out = append(out, pid)
		}
	}
	return out
}

// alive reports whether pid is a process that has not exited (a zombie
// has).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	for i := len(b) - 1; i > 0; i-- {
		if b[i] == ')' {
			if i+2 < len(b) {
				st := b[i+2]
				return st != 'Z' && st != 'X'
			}
			return false
		}
	}
	return false
}

// killTagged SIGKILLs every process of p's command — its tag's processes
// and every descendant of them and of p, stopped first so that none can
// fork or leave the tree meanwhile — until none is left or a bound is
// reached (a fork bomb keeps making them). It returns the processes it
// signalled.
func killTagged(p *proc) map[int]bool {
	killed := map[int]bool{}
	for range 50 {
		var roots []int
		p.whileLive(func() { roots = append(roots, p.pid) })
		roots = append(roots, tagged(p.tag)...)
		if len(roots) == 0 {
			break
		}
		all := freezeTree(roots, true)
		fresh := 0
		for _, pid := range all {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			if !killed[pid] {
				killed[pid] = true
				fresh++
			}
		}
		if fresh == 0 && !anyAlive(all) {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	// Until the reaper has collected them, the dead still count against
	// the sandbox's pids limit: a fork bomb's hundreds of zombies made the
	// next commands fail to fork. Wait (briefly) for them to be gone.
	deadline := time.Now().Add(time.Second)
	for p.tag != 0 && len(tagged(p.tag)) > 0 && time.Now().Before(deadline) {
		if p.table != nil {
			p.table.reap()
		}
		time.Sleep(2 * time.Millisecond)
	}
	return killed
}

func anyAlive(pids []int) bool {
	for _, pid := range pids {
		if alive(pid) {
			return true
		}
	}
	return false
}

// survivors lists the processes of p's command that are still alive after
// a kill, waiting up to a short grace for SIGKILL to land.
func survivors(p *proc) []int {
	if p.tag == 0 {
		return nil
	}
	deadline := time.Now().Add(500 * time.Millisecond)
	for {
		var left []int
		for _, pid := range tagged(p.tag) {
			if alive(pid) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(5 * time.Millisecond)
	}
}
