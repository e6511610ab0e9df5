// Package sandboxtest is the contract suite every sandboxkit backend runs:
// RunContract checks, one subtest per behaviour, that a backend's sandboxes
// do what package sandbox promises (commands, background jobs, files and
// their confinement, limits, closing and agent death).
//
// Threat model: the suite plays the untrusted side. Its commands and file
// requests try to leave the workspace (.., absolute paths, symbolic links
// made by a command, links swapped in during a call), print without end,
// ignore SIGTERM, keep pipes open and start daemons. Each attack must fail
// with a coded error and leave the sandbox usable, and after every subtest
// no process the sandbox started may survive. That last point is checked,
// not assumed: every process the suite starts carries a unique marker in
// its argv (a "sleep 1000.<n>" style argument), and the host's /proc is
// scanned for it once the sandbox is closed. The scan sees a backend's
// processes when they share the host's kernel (local tiers, Docker).
package sandboxtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// Factory creates a sandbox for one subtest. It must apply opts after its
// own options (the suite uses them for limits, environment and a caller's
// workspace), must be safe to call from parallel subtests, and may skip t
// when the backend cannot run here. The suite closes the sandbox itself;
// a Factory may also register its own cleanup.
type Factory func(t *testing.T, opts ...sandbox.Option) *sandbox.Sandbox

// RunContract runs the contract suite against the sandboxes newSandbox
// creates. Subtests run in parallel within their group, so a backend's
// test binary should leave -parallel at its default.
func RunContract(t *testing.T, newSandbox Factory) {
	groups := []struct {
		name  string
		tests []contractTest
	}{
		{"Environment", environmentTests},
		{"Commands", commandTests},
		{"Jobs", jobTests},
		{"Files", fileTests},
		{"Limits", limitTests},
		{"Hostile", hostileTests},
		{"Faults", faultTests},
		{"Lifecycle", lifecycleTests},
		{"Python", pythonTests},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, tc := range g.tests {
				t.Run(tc.name, func(t *testing.T) {
					if !tc.serial {
						t.Parallel()
					}
					tc.run(t, newSandbox)
				})
			}
		})
	}
}

// contractTest is one behaviour. serial tests run before the group's
// parallel ones (t.Setenv needs that).
type contractTest struct {
	name   string
	serial bool
	run    func(t *testing.T, newSandbox Factory)
}

// box is one subtest's sandbox with its process marker.
type box struct {
	t  *testing.T
	sb *sandbox.Sandbox
	// marker is unique to the subtest; every process the subtest starts
	// has it in its argv so that survivors can be found on the host.
	marker string
}

// open creates the subtest's sandbox and registers the end-of-test checks:
// Close, then no process carrying the marker may be alive.
func open(t *testing.T, newSandbox Factory, opts ...sandbox.Option) *box {
	t.Helper()
	b := &box{t: t, marker: newMarker()}
	b.sb = newSandbox(t, opts...)
	if b.sb == nil {
		t.Fatal("the factory returned a nil sandbox")
	}
	t.Cleanup(func() {
		closed := make(chan error, 1)
		go func() { closed <- b.sb.Close() }()
		select {
		case err := <-closed:
			if err != nil && !errors.Is(err, sandbox.ErrDead) {
				t.Errorf("Close: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("Close did not return within 20s")
		}
		expectNoSurvivors(t, b.marker, "after Close")
	})
	return b
}

// newMarker returns a number that is a valid sleep(1) duration of about
// 1000 s and unique enough to find this subtest's processes in /proc.
func newMarker() string {
	return fmt.Sprintf("1000.%09d", rand.IntN(1e9))
}

// sleep is a command line that sleeps "forever" and carries the marker.
func (b *box) sleep() string { return "sleep " + b.marker }

// ctx returns a context bounded well below the test binary's timeout, so
// a hang fails the one subtest with a message instead of the whole run.
func (b *box) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	b.t.Cleanup(cancel)
	return ctx
}

// run runs a command that must succeed (exit status 0).
func (b *box) run(cmd sandbox.Command) *sandbox.Result {
	b.t.Helper()
	res, err := b.sb.Commands.Run(b.ctx(), cmd)
	if err != nil {
		b.t.Fatalf("Run(%q %q): %v", cmd.Args, cmd.Shell, err)
	}
	if res.ExitCode != 0 {
		b.t.Fatalf("Run(%q %q): exit %d, stderr %q", cmd.Args, cmd.Shell, res.ExitCode, res.Stderr)
	}
	return res
}

func (b *box) write(path, data string) {
	b.t.Helper()
	if err := b.sb.Files.Write(b.ctx(), path, []byte(data), 0); err != nil {
		b.t.Fatalf("Write(%q): %v", path, err)
	}
}

func (b *box) read(path string) string {
	b.t.Helper()
	data, err := b.sb.Files.ReadFile(b.ctx(), path)
	if err != nil {
		b.t.Fatalf("ReadFile(%q): %v", path, err)
	}
	return string(data)
}

// usable checks that the sandbox still runs commands and serves files
// after an attack.
func (b *box) usable() {
	b.t.Helper()
	name := "usable-" + strconv.Itoa(rand.IntN(1e6)) + ".txt"
	b.write(name, "still here")
	if got := b.read(name); got != "still here" {
		b.t.Fatalf("the sandbox is not usable after the attack: read %q back", got)
	}
	if res := b.run(sandbox.Command{Args: []string{"echo", "ok"}}); res.Stdout != "ok\n" {
		b.t.Fatalf("the sandbox is not usable after the attack: echo printed %q", res.Stdout)
	}
}

// wantCode fails unless err is a sandbox error with the given code.
func wantCode(t *testing.T, what string, err error, code sandbox.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %s", what, code)
	}
	if got := sandbox.CodeOf(err); got != code {
		t.Fatalf("%s: error %v has code %q, want %s", what, err, got, code)
	}
	if !errors.Is(err, &sandbox.Error{Code: code}) {
		t.Fatalf("%s: errors.Is(%v, sentinel %s) is false", what, err, code)
	}
}

// hostProc is a process found on the host by its marker.
type hostProc struct {
	pid     int
	cmdline string
}

// markedProcs lists the live processes whose argv contains marker.
// Zombies have an empty cmdline and do not count: they are dead.
func markedProcs(marker string) []hostProc {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []hostProc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(raw, []byte(marker)) {
			continue
		}
		out = append(out, hostProc{pid: pid, cmdline: strings.TrimSpace(string(bytes.ReplaceAll(raw, []byte{0}, []byte{' '})))})
	}
	return out
}

// expectNoSurvivors fails the test if a marked process is still alive
// after a short grace (SIGKILL is delivered asynchronously), and kills
// the survivors so they cannot disturb later tests.
func expectNoSurvivors(t *testing.T, marker, when string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		ps := markedProcs(marker)
		if len(ps) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, p := range ps {
				t.Errorf("process %d (%s) survived %s", p.pid, p.cmdline, when)
				_ = killPID(p.pid)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitMarked waits until at least n marked processes are alive, so that a
// test kills what it means to kill rather than racing its start.
func waitMarked(t *testing.T, marker string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(markedProcs(marker)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d processes with marker %s never appeared (found %v)", n, marker, markedProcs(marker))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// agentPID returns the host pid of the sandbox's agent, or skips the test
// when the backend does not report it.
func (b *box) agentPID() int {
	b.t.Helper()
	s := b.sb.Info().Extra["agent_pid"]
	pid, err := strconv.Atoi(s)
	if err != nil || pid <= 0 {
		b.t.Skipf("the backend reports no host pid for its agent (Info().Extra[\"agent_pid\"] = %q)", s)
	}
	return pid
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
