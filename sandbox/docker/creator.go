package docker

import (
	"os"
	"strconv"
	"strings"
	"sync"
)

// Labels that name the process that created a container, so that GC can
// tell a leftover (its creator is gone) from a sandbox in use by a program
// that still runs, possibly on another machine sharing the engine.
const (
	LabelCreatorHost  = "sandboxkit.creator.host"  // the creating machine (see creator)
	LabelCreatorBoot  = "sandboxkit.creator.boot"  // its boot id: another boot means every process of that one is gone
	LabelCreatorPID   = "sandboxkit.creator.pid"   // the creating process
	LabelCreatorStart = "sandboxkit.creator.start" // its start time in clock ticks after boot, which tells a reused pid apart
)

// identity names a process across machines and reboots.
type identity struct {
	host  string // hostname, plus the machine id where one exists
	boot  string // kernel boot id; "" where the OS has none to read
	pid   int
	start string // /proc/PID/stat field 22; "" where unavailable
}

var (
	selfOnce sync.Once
	self     identity
)

// creator is this process's identity, computed once.
func creator() identity {
	selfOnce.Do(func() { self = identify(os.Getpid()) })
	return self
}

// identify reads the identity of process pid on this machine.
func identify(pid int) identity {
	host, _ := os.Hostname()
	// Two machines can share a hostname (e.g. containers called
	// "localhost"); the machine id tells them apart where there is one.
	if id := readTrim("/etc/machine-id"); id != "" {
		host += "/" + id
	}
	return identity{host: host, boot: readTrim("/proc/sys/kernel/random/boot_id"), pid: pid, start: procStart(pid)}
}

func (id identity) labels() map[string]string {
	return map[string]string{
		LabelCreatorHost:  id.host,
		LabelCreatorBoot:  id.boot,
		LabelCreatorPID:   strconv.Itoa(id.pid),
		LabelCreatorStart: id.start,
	}
}

// creatorState is what GC can say about a container's creator.
type creatorState int

const (
	creatorGone    creatorState = iota // the creating process no longer runs: the container is a leftover
	creatorAlive                       // it runs on this machine
	creatorElse                        // another machine, or a container without creator labels: undecidable here
	creatorUnknown                     // this machine, but this OS cannot tell (no /proc)
)

// stateOf decides from a container's labels whether its creator still
// runs. Only a process of this machine can be checked; a container of
// another machine is left to that machine's GC.
func stateOf(labels map[string]string) creatorState {
	me := creator()
	host, ok := labels[LabelCreatorHost]
	if !ok || host != me.host {
		return creatorElse
	}
	if me.boot == "" {
		return creatorUnknown
	}
	if labels[LabelCreatorBoot] != me.boot {
		// Made before this machine last booted: that process is gone.
		return creatorGone
	}
	pid, err := strconv.Atoi(labels[LabelCreatorPID])
	if err != nil || pid <= 0 {
		return creatorElse
	}
	start := procStart(pid)
	if start == "" {
		return creatorGone // no such process now
	}
	if start != labels[LabelCreatorStart] {
		return creatorGone // the pid was reused by a later process
	}
	return creatorAlive
}

// procStart returns the start time of process pid (field 22 of
// /proc/PID/stat, clock ticks after boot), "" if it does not exist.
func procStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// The command name (field 2) may hold spaces and parentheses: count
	// fields after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); field 22 is f[19].
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
