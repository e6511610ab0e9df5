package sandboxtest

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// Faults of the machine under the sandbox (issue 17): a full disk, a kill
// in the middle of a write, Close or the TTL cutting calls. They need a
// real boundary (a disk, an agent process to kill), so the fake skips them.
var faultTests = []contractTest{
	{name: "FullDiskKeepsTheOldFile", run: testFullDisk},
	{name: "FullQuotaKeepsTheOldFileAndNamesTheQuota", run: testFullQuota},
	{name: "KilledCopyInKeepsTheOldFileAndLeavesNoLitter", run: testKilledCopyIn},
	{name: "CloseCutsCallsWithClosed", run: testCloseCutsCalls},
	{name: "TTLCutsCallsWithClosed", run: testTTLCutsCalls},
	{name: "PythonAfterAgentDeathIsDead", run: testPythonAfterDeath},
}

// testFullDisk runs every write path against a file system that has room
// for the new content, but not beside the old: each fails with
// SBX_NO_SPACE saying the file is unchanged, and the file is. It used to
// rewrite the file in place on ENOSPC: overwriting 4 MiB with 6 MiB with 1
// MiB free left 5 MiB of new bytes. The message must not send the caller
// to Limits.DiskBytes: no quota was set, the disk is full.
func testFullDisk(t *testing.T, newSandbox Factory) {
	dir := smallFileSystem(t, 8<<20)
	b := open(t, newSandbox, sandbox.WithWorkspace(dir))
	if b.sb.Info().HostWorkspace == "" {
		t.Skip("the backend does not use a host workspace")
	}
	old := "MARK\n" + strings.Repeat("o", 4<<20)
	b.write("data.bin", old)
	b.write("filler.bin", strings.Repeat("f", 3<<20))
	intact := func(what string, err error) {
		t.Helper()
		if got := b.read("data.bin"); got != old {
			t.Fatalf("%s damaged the file: %d bytes, starting %q (error: %v)", what, len(got), got[:min(len(got), 8)], err)
		}
		if err != nil && strings.Contains(err.Error(), "raise Limits.DiskBytes") {
			t.Fatalf("%s: %v sends the caller to a quota that was never set", what, err)
		}
		wantCode(t, what, err, sandbox.CodeNoSpace)
		wantMessage(t, what, err, "unchanged")
	}
	intact("Write over the file with more than the free space", b.sb.Files.Write(b.ctx(), "data.bin", []byte(strings.Repeat("n", 6<<20)), 0))
	_, err := b.sb.Files.Edit(b.ctx(), "data.bin", "MARK", "MORK", sandbox.EditOptions{})
	intact("Edit of a file larger than the free space", err)
	intact("CopyIn over the file", b.sb.Files.CopyIn(b.ctx(), "", makeTar(t, []tarFile{{name: "data.bin", body: strings.Repeat("c", 2<<20), mode: 0o644, typ: tar.TypeReg}})))
	err = b.sb.Files.Append(b.ctx(), "data.bin", []byte(strings.Repeat("a", 2<<20)))
	wantCode(t, "Append past the free space", err, sandbox.CodeNoSpace)
	if got := b.read("data.bin"); got != old {
		t.Fatalf("a failed Append left %d bytes, want the %d it had", len(got), len(old))
	}
	noTemporaryFiles(t, b)
	// With room made, the same write goes through.
	if err := b.sb.Files.Remove(b.ctx(), "filler.bin", sandbox.RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.sb.Files.Write(b.ctx(), "data.bin", []byte("new"), 0); err != nil || b.read("data.bin") != "new" {
		t.Fatalf("Write after freeing space: %v", err)
	}
	b.usable()
}

// testFullQuota fills a workspace with a quota so that the new content of
// a file fits the quota but not beside the old: where the backend enforces
// the quota with a file system of that size (Docker's tmpfs), the write
// fails with SBX_QUOTA naming Limits.DiskBytes and the old file intact;
// where the quota is counted by the agent only, the write goes through.
// Either way the file holds the old or the new content.
func testFullQuota(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox, sandbox.WithLimits(sandbox.Limits{DiskBytes: 8 << 20}))
	old, next := strings.Repeat("o", 4<<20), strings.Repeat("n", 4<<20)
	b.write("data.bin", old)
	b.write("filler.bin", strings.Repeat("f", 3<<20))
	err := b.sb.Files.Write(b.ctx(), "data.bin", []byte(next), 0)
	got := b.read("data.bin")
	if err == nil {
		if got != next {
			t.Fatalf("a write that succeeded left %d bytes", len(got))
		}
		t.Log("the write went through: this backend's quota left room for both copies")
		return
	}
	wantCode(t, "Write past the quota", err, sandbox.CodeQuota)
	wantMessage(t, "Write past the quota", err, "Limits.DiskBytes", "unchanged")
	if got != old {
		t.Fatalf("a failed write damaged the file: %d bytes", len(got))
	}
	noTemporaryFiles(t, b)
}

// slowTar streams one huge tar entry until stop is closed, counting what
// it sent.
type slowTar struct {
	head []byte
	sent atomic.Int64
	stop chan struct{}
}

func (s *slowTar) Read(p []byte) (int, error) {
	select {
	case <-s.stop:
		return 0, io.ErrClosedPipe
	default:
	}
	if len(s.head) > 0 {
		n := copy(p, s.head)
		s.head = s.head[n:]
		return n, nil
	}
	n := min(len(p), 64<<10)
	for i := range p[:n] {
		p[i] = 'n'
	}
	s.sent.Add(int64(n))
	return n, nil
}

// testKilledCopyIn kills the agent while CopyIn is replacing a file with a
// 50 MB entry: the file on the host keeps its old content (7 of 10 kills
// used to leave it torn or empty), and the next sandbox on the workspace
// sweeps the temporary file the dead one left.
func testKilledCopyIn(t *testing.T, newSandbox Factory) {
	mine, err := os.MkdirTemp("", "sandboxkit-contract-kill-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(mine) })
	if err := os.Chmod(mine, 0o777); err != nil {
		t.Fatal(err)
	}
	old := strings.Repeat("o", 1<<20)
	for round, at := range []int64{1 << 20, 7 << 20, 19 << 20} {
		b := open(t, newSandbox, sandbox.WithWorkspace(mine))
		if b.sb.Info().HostWorkspace == "" {
			t.Skip("the backend does not use a host workspace")
		}
		pid := b.agentPID()
		if round == 0 {
			b.write("data.bin", old)
		}
		var hdr strings.Builder
		tw := tar.NewWriter(&hdr)
		if err := tw.WriteHeader(&tar.Header{Name: "data.bin", Mode: 0o644, Size: 50 << 20, Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Flush()
		src := &slowTar{head: []byte(hdr.String()), stop: make(chan struct{})}
		done := make(chan error, 1)
		go func() { done <- b.sb.Files.CopyIn(context.Background(), "", src) }()
		eventually(t, "CopyIn streams", 30*time.Second, func() bool { return src.sent.Load() >= at })
		if err := killPID(pid); err != nil {
			t.Fatalf("killing the agent: %v", err)
		}
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("CopyIn reported success although the agent was killed during it")
			}
		case <-time.After(20 * time.Second):
			t.Fatal("CopyIn does not return after the agent was killed")
		}
		close(src.stop)
		if data, err := os.ReadFile(filepath.Join(mine, "data.bin")); err != nil || string(data) != old {
			t.Fatalf("kill after %d bytes of CopyIn: the file holds %d bytes (%v), want its old %d", at, len(data), err, len(old))
		}
	}
	// The next sandbox on the workspace removes what dead writers left.
	next := open(t, newSandbox, sandbox.WithWorkspace(mine))
	eventually(t, "the next sandbox sweeps dead writers' temporary files", 20*time.Second, func() bool {
		ents, _ := os.ReadDir(mine)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".sbx-tmp-") {
				return false
			}
		}
		return true
	})
	if got := next.read("data.bin"); got != old {
		t.Fatalf("data.bin holds %d bytes, want its old %d", len(got), len(old))
	}
}

// testCloseCutsCalls closes a sandbox while a command runs and a job is
// waited on: both calls end with SBX_CLOSED (they said SBX_DEAD, "the
// sandbox died… check OOM", for a Close the caller made).
func testCloseCutsCalls(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	cutCalls(t, b, func() {
		if err := b.sb.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
}

// testTTLCutsCalls: the same when the TTL fires.
func testTTLCutsCalls(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox, sandbox.WithTTL(3*time.Second))
	cutCalls(t, b, func() {})
}

// cutCalls starts a command and a job wait that outlive the sandbox, runs
// end, and checks both calls return SBX_CLOSED.
func cutCalls(t *testing.T, b *box, end func()) {
	t.Helper()
	j, err := b.sb.Commands.Start(b.ctx(), sandbox.Command{Args: []string{"sleep", b.marker}})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	go func() {
		_, err := b.sb.Commands.Run(b.ctx(), sandbox.Command{Args: []string{"sleep", b.marker}, Timeout: 50 * time.Second})
		errs <- err
	}()
	go func() {
		_, err := j.Wait(b.ctx())
		errs <- err
	}()
	waitMarked(t, b.marker, 2)
	end()
	for range 2 {
		select {
		case err := <-errs:
			wantCode(t, "a call cut by the sandbox's end", err, sandbox.CodeClosed)
		case <-time.After(30 * time.Second):
			t.Fatal("a call pending when the sandbox ended hangs")
		}
	}
}

// testPythonAfterDeath kills the agent under a Python context: the next
// Python call says the sandbox is dead, not "call Restart" (SBX_ENDED),
// which cannot help.
func testPythonAfterDeath(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	if !b.sb.Info().PythonAvailable {
		Unavailable(t, "python", "the sandbox has no python3")
	}
	pid := b.agentPID()
	if _, err := b.sb.Python.Run(b.ctx(), "import time", sandbox.PythonRunOptions{}); err != nil {
		t.Fatal(err)
	}
	// A run in flight when the agent dies, and one after.
	running := make(chan error, 1)
	go func() {
		_, err := b.sb.Python.Run(b.ctx(), "time.sleep(1000)", sandbox.PythonRunOptions{Timeout: 50 * time.Second})
		running <- err
	}()
	time.Sleep(500 * time.Millisecond)
	if err := killPID(pid); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-running:
		wantCode(t, "a Python run in flight when the agent died", err, sandbox.CodeDead)
	case <-time.After(20 * time.Second):
		t.Fatal("a Python run in flight when the agent died hangs")
	}
	_, err := b.sb.Python.Run(b.ctx(), "x", sandbox.PythonRunOptions{})
	wantCode(t, "Python after the agent died", err, sandbox.CodeDead)
}
