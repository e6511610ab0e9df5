//go:build linux

package local

import (
	"bytes"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

var _ driver.Prober = (*instance)(nil)

// Exited reports whether the agent has exited, is being killed, or is
// stopped, from what the kernel says about it; no round trip. Package sandbox's Pool asks
// it before handing over a ready sandbox, where it replaced a ping through
// the agent that cost 0.1–0.3 ms of a Get whose target is 2 ms with the
// first command; this costs a poll(2) and a read of /proc (~10 µs).
//
// A killed process passes through states that each check covers:
//   - killed, not yet gone: kill(2) (and the OOM killer, a parent-death
//     signal, cgroup.kill) puts SIGKILL in the process's shared pending set
//     before it returns, and nothing takes it out until the process is
//     reaped; its threads take the signal from their private sets, so the
//     leader's SigPnd alone misses a leader already on its way out (under
//     the race detector that window handed a dead sandbox over in one run
//     of TestPoolReplacesDeadSandboxes out of five). /proc/PID/status shows
//     ShdPnd, and State Z once the leader has exited;
//   - every thread gone: the agent is the only process holding the other
//     end of its socket (commands get descriptors of their own, and the
//     socket is close-on-exec), so this end reads as hung up
//     (POLLHUP/POLLRDHUP);
//   - reaped: the Wait goroutine has closed done (and /proc/PID is gone).
//
// An agent that exits on its own (a crash) shows no SIGKILL: it is seen
// from the moment its leader is a zombie or its descriptors are released,
// which a ping would have seen up to a few milliseconds sooner.
//
// A stopped agent (SIGSTOP from anything on the host: State T, or the
// signal still pending) is alive but answers nothing until someone
// continues it, so it counts too: the ping this replaced timed out on
// one, and without the check Pool.Get handed it over and the caller's
// first command hung until its deadline (TestPoolSkipsAStoppedAgent).
// A tracing stop (State t) does not count: a debugger or strace attached
// to a healthy agent passes through it between system calls.
func (i *instance) Exited() bool {
	select {
	case <-i.done:
		return true
	default:
	}
	// The stream holds the socket (stream.go took it from conn).
	sc, ok := i.stream.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	hup := false
	if err := rc.Control(func(fd uintptr) {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		for {
			_, err := unix.Poll(pfd, 0)
			if err != unix.EINTR {
				hup = err != nil || pfd[0].Revents&(unix.POLLHUP|unix.POLLRDHUP|unix.POLLERR|unix.POLLNVAL) != 0
				return
			}
		}
	}); err != nil {
		return true // the stream is closed: the sandbox is over
	}
	// The pid cannot have been reused: the agent is the host's child and
	// is reaped only by the Wait goroutine (done, checked first; a reap in
	// between leaves /proc/PID gone or the socket hung up).
	return hup || dying(i.pid)
}

// dying reports whether /proc/PID/status shows the process exited (State
// Z or X), stopped (State T), or with a SIGKILL or SIGSTOP pending
// (SigPnd, ShdPnd). An unreadable file counts as exited.
func dying(pid int) bool {
	gone, stopped := procStatus(pid)
	return gone || stopped
}

// procStatus reads /proc/PID/status: gone is exited (State Z or X), a
// SIGKILL pending, or no such live process; stopped is State T or a
// SIGSTOP pending.
func procStatus(pid int) (gone, stopped bool) {
	var buf [4096]byte
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/status", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return true, false
	}
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil || m <= 0 {
			break
		}
		n += m
	}
	unix.Close(fd)
	seen := 0
	for line := range bytes.Lines(buf[:n]) {
		key, val, ok := bytes.Cut(bytes.TrimSpace(line), []byte(":"))
		if !ok {
			continue
		}
		val = bytes.TrimSpace(val)
		switch string(key) {
		case "State":
			if len(val) == 0 || val[0] == 'Z' || val[0] == 'X' || val[0] == 'x' {
				return true, false
			}
			stopped = stopped || val[0] == 'T'
			seen++
		case "SigPnd", "ShdPnd":
			mask, err := strconv.ParseUint(string(val), 16, 64)
			if err != nil || mask&(1<<(unix.SIGKILL-1)) != 0 {
				return true, false
			}
			stopped = stopped || mask&(1<<(unix.SIGSTOP-1)) != 0
			seen++
		}
	}
	return seen < 3, stopped // a status without the three lines: not a live process
}
