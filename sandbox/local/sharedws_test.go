//go:build linux

package local_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/local"
)

// owner is a file's uid and gid.
type owner struct{ uid, gid uint32 }

func ownerOf(t *testing.T, p string) owner {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return owner{st.Uid, st.Gid}
}

// sharedTree makes a workspace owned by 1000:1000 (as root does for a
// user's directory) holding files of several owners, a symlink, a hardlink
// pair inside it and a file hardlinked from outside it. It returns the
// workspace, the outside file and every path's owner.
func sharedTree(t *testing.T) (ws, outside string, owners map[string]owner) {
	t.Helper()
	base, err := os.MkdirTemp("", "sandboxkit-shared-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(base, 0o755)
	t.Cleanup(func() { os.RemoveAll(base) })
	ws = filepath.Join(base, "ws")
	outside = filepath.Join(base, "outside.txt")
	owners = map[string]owner{}
	mk := func(rel string, dir bool, o owner) {
		p := filepath.Join(ws, rel)
		var err error
		if dir {
			err = os.Mkdir(p, 0o755)
		} else {
			err = os.WriteFile(p, []byte("old "+rel+"\n"), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, int(o.uid), int(o.gid)); err != nil {
			t.Fatal(err)
		}
		owners[rel] = o
	}
	mk("", true, owner{1000, 1000})
	mk("mine.txt", false, owner{1000, 1000})
	mk("roots.txt", false, owner{0, 0})
	mk("sub", true, owner{1234, 1234})
	mk("sub/other.txt", false, owner{1234, 100})
	if err := os.Symlink("mine.txt", filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	os.Lchown(filepath.Join(ws, "link"), 1000, 1000)
	owners["link"] = owner{1000, 1000}
	if err := os.Link(filepath.Join(ws, "mine.txt"), filepath.Join(ws, "sub", "mine-again.txt")); err != nil {
		t.Fatal(err)
	}
	owners["sub/mine-again.txt"] = owner{1000, 1000}
	if err := os.WriteFile(outside, []byte("outside\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chown(outside, 4242, 4242)
	if err := os.Link(outside, filepath.Join(ws, "from-outside.txt")); err != nil {
		t.Fatal(err)
	}
	owners["from-outside.txt"] = owner{4242, 4242}
	return ws, outside, owners
}

// checkOwners fails for every path of want whose owner differs.
func checkOwners(t *testing.T, ws string, want map[string]owner, when string) {
	t.Helper()
	for rel, o := range want {
		if got := ownerOf(t, filepath.Join(ws, rel)); got != o {
			t.Errorf("%s: %q is owned by %d:%d, want %d:%d", when, rel, got.uid, got.gid, o.uid, o.gid)
		}
	}
}

func newOnWorkspace(t *testing.T, ws string, opts ...sandbox.Option) *sandbox.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := sandbox.New(ctx, append([]sandbox.Option{sandbox.WithWorkspace(ws)}, opts...)...)
	if err != nil {
		t.Fatalf("sandbox.New on %s: %v", ws, err)
	}
	return sb
}

func shell(t *testing.T, sb *sandbox.Sandbox, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := sb.Commands.Run(ctx, sandbox.Command{Shell: "exec 2>&1\n" + script})
	if err != nil {
		t.Fatal(err)
	}
	return res.Stdout
}

// TestSharedWorkspaceAsRoot is issue 17's shared workspace: as root each
// sandbox was given the workspace by chowning it to its own uid, so a
// second sandbox locked the first out of its own files (SBX_PERMISSION),
// closing them in the wrong order left the tree to a random uid, every
// file's own owner was lost (1000:1000 became 0:0) and a file hardlinked in
// from outside was chowned too. Now every sandbox on the workspace reads
// and writes all of it, and after the last one closes (in any order) each
// file has its owner back, new files the workspace's owner; nothing
// outside the workspace changes owner, not even for the sandbox's life.
func TestSharedWorkspaceAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only a root host gives the workspace to sandbox uids; as a user every sandbox runs as that user")
	}
	for _, tier := range []string{"best", "landlock"} {
		t.Run(tier, func(t *testing.T) {
			var opts []sandbox.Option
			if tier == "landlock" {
				opts = []sandbox.Option{sandbox.WithDriver(local.New(local.WithTier(sandbox.TierLandlock))), sandbox.AllowWeaker(sandbox.TierLandlock)}
			}
			ws, outside, owners := sharedTree(t)
			one := newOnWorkspace(t, ws, opts...)
			defer one.Close()
			out := shell(t, one, "echo one > one.txt && cat mine.txt && echo ok-one")
			if !strings.Contains(out, "ok-one") {
				t.Fatalf("the first sandbox cannot write its workspace:\n%s", out)
			}
			two := newOnWorkspace(t, ws, opts...)
			defer two.Close()
			// Each writes its own file and the other's, and a file of each
			// original owner, after both are running.
			for i, sb := range []*sandbox.Sandbox{one, two, one} {
				out := shell(t, sb, fmt.Sprintf(`echo %d >> one.txt && echo %[1]d >> two.txt && echo %[1]d >> mine.txt && echo %[1]d >> roots.txt && echo %[1]d >> sub/other.txt && mkdir -p sub/new%[1]d && echo x > sub/new%[1]d/f && echo ok`, i))
				if !strings.HasSuffix(strings.TrimSpace(out), "ok") {
					t.Errorf("sandbox %d of 2 cannot write the shared workspace:\n%s", i%2+1, out)
				}
			}
			ctx := context.Background()
			if _, err := one.Files.Read(ctx, "two.txt", sandbox.ReadOptions{}); err != nil {
				t.Errorf("the first sandbox cannot read what the second wrote: %v", err)
			}
			if err := one.Files.Write(ctx, "sub/other.txt", []byte("by the file API\n"), 0); err != nil {
				t.Errorf("the first sandbox's file API cannot write the shared workspace: %v", err)
			}
			if got := ownerOf(t, outside); got != (owner{4242, 4242}) {
				t.Errorf("a file outside the workspace (hardlinked into it) was chowned to %d:%d while the sandboxes ran", got.uid, got.gid)
			}
			// The order the issue found wrong: the first one closes first.
			if err := one.Close(); err != nil {
				t.Fatal(err)
			}
			if out := shell(t, two, "echo still >> mine.txt && echo ok"); !strings.Contains(out, "ok") {
				t.Errorf("the second sandbox lost its workspace when the first closed:\n%s", out)
			}
			if err := two.Close(); err != nil {
				t.Fatal(err)
			}
			checkOwners(t, ws, owners, "after both closed")
			for _, rel := range []string{"one.txt", "two.txt", "sub/new0", "sub/new0/f", "sub/new1/f"} {
				if got := ownerOf(t, filepath.Join(ws, rel)); got != owners[""] {
					t.Errorf("new file %q is owned by %d:%d, want the workspace's owner %d:%d", rel, got.uid, got.gid, owners[""].uid, owners[""].gid)
				}
			}
			if got := ownerOf(t, outside); got != (owner{4242, 4242}) {
				t.Errorf("the outside file is owned by %d:%d, want 4242:4242", got.uid, got.gid)
			}
		})
	}
}

// TestGCRestoresWorkspaceOwnersAfterHostSIGKILL kills a host (root) that
// had a sandbox on a workspace; the files stay with the sandbox's uid until
// `sandboxkit gc` (local.GCHost) gives each back to its owner.
func TestGCRestoresWorkspaceOwnersAfterHostSIGKILL(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only a root host gives the workspace to sandbox uids")
	}
	ws, outside, owners := sharedTree(t)
	startKilledHost(t, ws, func() {
		if got := ownerOf(t, filepath.Join(ws, "mine.txt")); got == owners["mine.txt"] {
			t.Fatalf("the sandbox did not get the workspace (mine.txt still %d:%d): the test proves nothing", got.uid, got.gid)
		}
	})
	lines, err := local.GCHost()
	if err != nil {
		t.Fatalf("GCHost: %v", err)
	}
	if !strings.Contains(strings.Join(lines, "\n"), ws) {
		t.Errorf("GCHost did not report the workspace %s: %q", ws, lines)
	}
	checkOwners(t, ws, owners, "after gc")
	if got := ownerOf(t, filepath.Join(ws, "made-by-sandbox.txt")); got != owners[""] {
		t.Errorf("the sandbox's new file is owned by %d:%d after gc, want %d:%d", got.uid, got.gid, owners[""].uid, owners[""].gid)
	}
	if got := ownerOf(t, outside); got != (owner{4242, 4242}) {
		t.Errorf("the outside file is owned by %d:%d, want 4242:4242", got.uid, got.gid)
	}
	// Nothing left to do for a second run.
	if lines, err := local.GCHost(); err != nil || strings.Contains(strings.Join(lines, "\n"), ws) {
		t.Errorf("a second gc: %q, %v", lines, err)
	}
}

// workspaceHelper is the host killed by
// TestGCRestoresWorkspaceOwnersAfterHostSIGKILL: a sandbox on ws that made
// a file there, then READY, then it waits to be killed.
func workspaceHelper(ws string) int {
	ctx := context.Background()
	sb, err := sandbox.New(ctx, sandbox.WithWorkspace(ws))
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	if res, err := sb.Commands.Run(ctx, sandbox.Command{Shell: "echo new > made-by-sandbox.txt && echo more >> mine.txt"}); err != nil || res.ExitCode != 0 {
		fmt.Println("ERROR", err, res.Stdout, res.Stderr)
		return 1
	}
	fmt.Println("READY")
	select {}
}

// startKilledHost starts workspaceHelper on ws, runs before while its
// sandbox runs, kills it with SIGKILL and returns its pid.
func startKilledHost(t *testing.T, ws string, before func()) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=workspace:"+ws)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	buf := make([]byte, 4096)
	n, _ := stdout.Read(buf)
	if !strings.HasPrefix(string(buf[:n]), "READY") {
		t.Fatalf("helper: %s", buf[:n])
	}
	before()
	return cmd.Process.Pid
}

// cgroupsOf lists the cgroup directories named after host pid (as the
// local backend names its sandboxes' cgroups) in every hierarchy.
func cgroupsOf(pid int) []string {
	var out []string
	prefix := fmt.Sprintf("sandboxkit-%d-", pid)
	filepath.WalkDir("/sys/fs/cgroup", func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if strings.HasPrefix(d.Name(), prefix) {
			out = append(out, p)
			return filepath.SkipDir
		}
		return nil
	})
	return out
}

// TestGCRemovesCgroupsOfKilledHost is issue 17's litter: the cgroups of a
// host killed with SIGKILL stayed, and `sandboxkit gc` did not remove them.
func TestGCRemovesCgroupsOfKilledHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cgroups are made where the host may write them: as root here")
	}
	ws, _, _ := sharedTree(t)
	var made []string
	pid := startKilledHost(t, ws, func() {})
	made = cgroupsOf(pid)
	if len(made) == 0 {
		t.Skip("the sandbox got no cgroup on this machine")
	}
	lines, err := local.GCHost()
	if err != nil {
		t.Fatalf("GCHost: %v", err)
	}
	t.Logf("gc: %q", lines)
	if left := cgroupsOf(pid); len(left) > 0 {
		t.Errorf("cgroups of the killed host %d are still there after gc: %v", pid, left)
	}
}

// TestSharedWorkspaceManyAtOnce starts and closes sandboxes on one
// workspace at the same time, as an MCP server's sessions do: none is
// refused its files, and when the last is gone every file has its owner
// back.
func TestSharedWorkspaceManyAtOnce(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only a root host gives the workspace to sandbox uids")
	}
	ws, outside, owners := sharedTree(t)
	const n = 6
	var wg sync.WaitGroup
	errs := make(chan string, 2*n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			sb, err := sandbox.New(ctx, sandbox.WithWorkspace(ws))
			if err != nil {
				errs <- fmt.Sprintf("sandbox %d: New: %v", i, err)
				return
			}
			defer sb.Close()
			for round := range 3 {
				res, err := sb.Commands.Run(ctx, sandbox.Command{Shell: fmt.Sprintf("echo %d.%d >> mine.txt && echo x > own%d-%d && cat roots.txt sub/other.txt >/dev/null", i, round, i, round)})
				if err != nil || res.ExitCode != 0 {
					errs <- fmt.Sprintf("sandbox %d round %d: %v %s%s", i, round, err, res.Stdout, res.Stderr)
				}
				time.Sleep(time.Duration(i*round) * 5 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	checkOwners(t, ws, owners, "after all closed")
	for i := range n {
		if got := ownerOf(t, filepath.Join(ws, fmt.Sprintf("own%d-2", i))); got != owners[""] {
			t.Errorf("own%d-2 is owned by %d:%d, want %d:%d", i, got.uid, got.gid, owners[""].uid, owners[""].gid)
		}
	}
	if got := ownerOf(t, outside); got != (owner{4242, 4242}) {
		t.Errorf("the outside file is owned by %d:%d", got.uid, got.gid)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "mine.txt")); strings.Count(string(b), "\n") != 1+3*n {
		t.Errorf("mine.txt has %d lines, want %d:\n%s", strings.Count(string(b), "\n"), 1+3*n, b)
	}
}

// TestWorkspaceOfKilledHostServesTheNextSandbox: a sandbox on a workspace
// whose last host was killed (gc has not run) gets it, and its Close gives
// every file back to the owner it had before the killed host's sandbox.
func TestWorkspaceOfKilledHostServesTheNextSandbox(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only a root host gives the workspace to sandbox uids")
	}
	ws, outside, owners := sharedTree(t)
	startKilledHost(t, ws, func() {})
	sb := newOnWorkspace(t, ws)
	if out := shell(t, sb, "echo next >> mine.txt && echo x > sub/next.txt && cat made-by-sandbox.txt && echo ok"); !strings.Contains(out, "ok") {
		t.Errorf("the next sandbox cannot use the workspace:\n%s", out)
	}
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	checkOwners(t, ws, owners, "after the next sandbox closed")
	for _, rel := range []string{"made-by-sandbox.txt", "sub/next.txt"} {
		if got := ownerOf(t, filepath.Join(ws, rel)); got != owners[""] {
			t.Errorf("%s is owned by %d:%d, want %d:%d", rel, got.uid, got.gid, owners[""].uid, owners[""].gid)
		}
	}
	if got := ownerOf(t, outside); got != (owner{4242, 4242}) {
		t.Errorf("the outside file is owned by %d:%d", got.uid, got.gid)
	}
}
