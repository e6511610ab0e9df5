//go:build linux

package local_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// TestLandlockTierKeepsHostSharedMemoryOut: the landlock tier shares the
// host's /dev, whose /dev/shm holds the POSIX shared memory of the host's
// programs (and of other sandboxes). Its Landlock rule on all of /dev let
// a sandbox read and overwrite them: here a 0666 file the test leaves
// there. The devices programs use (null, zero, urandom, tty, a pty for a
// bash session) keep working.
func TestLandlockTierKeepsHostSharedMemoryOut(t *testing.T) {
	sb := newLandlockTier(t)
	shm := fmt.Sprintf("/dev/shm/sandboxkit-test-%d", os.Getpid())
	if err := os.WriteFile(shm, []byte("host-secret\n"), 0o666); err != nil {
		t.Skipf("no /dev/shm here: %v", err)
	}
	os.Chmod(shm, 0o666)
	t.Cleanup(func() { os.Remove(shm) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := sb.Commands.Run(ctx, sandbox.Command{Shell: fmt.Sprintf(`exec 2>&1
cat %[1]s && echo READ-HOST-SHM
echo pwned > %[1]s && echo WROTE-HOST-SHM
ls /dev/shm | grep -q sandboxkit-test && echo LISTED-HOST-SHM
echo x > /dev/null && head -c 4 /dev/zero | wc -c && head -c 4 /dev/urandom | wc -c && echo devices-ok`, shm)})
	if err != nil {
		t.Fatal(err)
	}
	out := res.Stdout
	for _, bad := range []string{"host-secret", "READ-HOST-SHM", "WROTE-HOST-SHM", "LISTED-HOST-SHM"} {
		if strings.Contains(out, bad) {
			t.Errorf("the sandbox reached the host's /dev/shm (%s):\n%s", bad, out)
		}
	}
	if b, _ := os.ReadFile(shm); string(b) != "host-secret\n" {
		t.Errorf("the host's shared memory file now holds %q", b)
	}
	if !strings.Contains(out, "devices-ok") {
		t.Errorf("/dev/null, /dev/zero or /dev/urandom do not work:\n%s", out)
	}
	sh, err := sb.Shells.Open(ctx, sandbox.ShellOptions{})
	if err != nil {
		t.Fatalf("a bash session (a pty) on the landlock tier: %v", err)
	}
	r, err := sh.Run(ctx, "tty && echo session-ok", sandbox.ShellRunOptions{})
	if err != nil || !strings.Contains(r.Output, "session-ok") || !strings.Contains(r.Output, "/dev/pts/") {
		t.Errorf("bash session: %+v, %v", r, err)
	}
}

// TestLandlockTierKeepsHostSysVIPCOut: without an ipc namespace, the
// landlock tier shared the host's System V IPC: a sandbox attached a
// shared memory segment the host made (mode 0666, as X11's MIT-SHM and
// PostgreSQL make theirs for their users) and read it.
func TestLandlockTierKeepsHostSysVIPCOut(t *testing.T) {
	sb := newLandlockTier(t)
	if sb.Info().Python == "" {
		t.Skip("no python3 in the sandbox")
	}
	id, err := unix.SysvShmGet(unix.IPC_PRIVATE, 4096, unix.IPC_CREAT|0o666)
	if err != nil {
		t.Skipf("no System V shared memory here: %v", err)
	}
	t.Cleanup(func() { unix.SysvShmCtl(id, unix.IPC_RMID, nil) })
	mem, err := unix.SysvShmAttach(id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	copy(mem, "host-shm-secret")
	defer unix.SysvShmDetach(mem)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	script := fmt.Sprintf(`cat > "$TMPDIR/ipc.py" <<'EOF'
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
addr = libc.shmat(%d, None, 0o10000)
if addr is None or addr == ctypes.c_void_p(-1).value:
    print("shmat refused", ctypes.get_errno())
else:
    print("shmat attached:", ctypes.string_at(addr, 15).decode())
print("ipc-done")
EOF
%s "$TMPDIR/ipc.py"`, id, sb.Info().Python)
	res, err := sb.Commands.Run(ctx, sandbox.Command{Shell: script})
	if err != nil {
		t.Fatal(err)
	}
	out := res.Stdout + res.Stderr
	if strings.Contains(out, "host-shm-secret") || strings.Contains(out, "attached") {
		t.Errorf("the sandbox attached the host's shared memory segment %d:\n%s", id, out)
	}
	if !strings.Contains(out, "ipc-done") {
		t.Errorf("the probe did not run:\n%s", out)
	}
	for _, g := range sb.Info().Gaps {
		if strings.Contains(g, "System V") {
			t.Errorf("Info().Gaps still admits the host's IPC: %q", g)
		}
	}
}
