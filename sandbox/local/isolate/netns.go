//go:build linux

package isolate

import (
	"fmt"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// A spare network namespace, made in the background for the next
// namespace-tier sandbox without network.
//
// Making a network namespace is the dearest step of a sandbox's setup:
// the kernel runs every protocol's per-namespace init (IPv4, IPv6 with its
// sysctl tables, netfilter, ...), 0.6–0.8 ms of the child's 2 ms on this
// machine kind (docs/isolation.md, "Where a local create goes"), and the
// agent cannot start before it is done. A namespace holds no state of a
// sandbox until one joins it, so a host running as root makes the next one
// ahead of time, with its loopback up, and the launch's vforked child joins
// it with setns(2) instead of creating one; the first create of a process
// (and one that finds the spare taken by a concurrent create) makes its own
// as before. Each spare is used by one sandbox only: the child takes the
// descriptor, and the namespace goes away with the sandbox's last process.
//
// The namespace is owned by the host's user namespace, not the sandbox's:
// root inside the sandbox holds no capability over it (it cannot add an
// interface, a route or a firewall rule, nor take lo down). Inside, the
// capabilities are dropped before the agent runs anyway; this takes away
// even the setup's. Only root can make one for a child that joins it
// before it leaves the host's credentials; other hosts keep the in-child
// unshare.
var spareNetns struct {
	mu     sync.Mutex
	fd     int  // a ready namespace, -1 none
	making bool // a goroutine is making the next one
	off    bool // making one failed: this host cannot (see makeNetns)
}

func init() { spareNetns.fd = -1 }

// takeSpareNetns returns a ready network namespace (an O_CLOEXEC
// descriptor the caller owns and closes), or -1 when none is ready, and
// starts making the next one.
func takeSpareNetns() int {
	s := &spareNetns
	s.mu.Lock()
	defer s.mu.Unlock()
	fd := s.fd
	s.fd = -1
	if !s.making && !s.off {
		s.making = true
		go refillSpareNetns()
	}
	return fd
}

func refillSpareNetns() {
	fd, err := makeNetns()
	s := &spareNetns
	s.mu.Lock()
	defer s.mu.Unlock()
	s.making = false
	if err != nil {
		s.off = true
		return
	}
	if s.fd >= 0 {
		unix.Close(fd)
		return
	}
	s.fd = fd
}

// makeNetns makes a network namespace with lo up and returns a descriptor
// of it. The namespace is made on a thread locked to one goroutine, which
// goes back to the host's namespace before it is unlocked. If it cannot,
// the goroutine ends locked, and the runtime ends the thread with it
// (runtime.LockOSThread) rather than run other goroutines in the wrong
// namespace. Threads the runtime starts meanwhile come from its template
// thread, not from this one.
func makeNetns() (fd int, err error) {
	fd = -1
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		hostNS, herr := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if herr != nil {
			runtime.UnlockOSThread()
			err = fmt.Errorf("isolate: open the host's network namespace: %w", herr)
			return
		}
		defer unix.Close(hostNS)
		if err = unix.Unshare(unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			err = fmt.Errorf("isolate: unshare the network namespace: %w", err)
			return
		}
		fd, err = setUpNetns()
		if serr := unix.Setns(hostNS, unix.CLONE_NEWNET); serr != nil {
			return // still locked: the thread ends with this goroutine
		}
		runtime.UnlockOSThread()
	}()
	<-done
	if err != nil && fd >= 0 {
		unix.Close(fd)
		fd = -1
	}
	return fd, err
}

// setUpNetns brings lo up in the calling thread's network namespace and
// returns a descriptor of the namespace.
func setUpNetns() (int, error) {
	// Programs inside may talk to themselves over 127.0.0.1, and there
	// is no other interface.
	sock, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("isolate: socket for lo: %w", err)
	}
	defer unix.Close(sock)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return -1, err
	}
	ifr.SetUint16(unix.IFF_UP | unix.IFF_LOOPBACK | unix.IFF_RUNNING)
	if err := unix.IoctlIfreq(sock, unix.SIOCSIFFLAGS, ifr); err != nil {
		return -1, fmt.Errorf("isolate: bring lo up: %w", err)
	}
	fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("isolate: open the network namespace: %w", err)
	}
	return fd, nil
}
