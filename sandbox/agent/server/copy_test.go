//go:build linux

// The agent serves only on Linux (hardenProcess refuses elsewhere), so the
// tests that run one are Linux-only.

package server

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox/agent"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// pairLimits is pair with the file-size and disk limits of the Hello set.
func pairLimits(t *testing.T, dir string, fsize, disk int64) *agent.Client {
	t.Helper()
	c, _ := servePair(t, ServeOptions{}, wire.Hello{Workspace: dir, Env: []string{"PATH=/usr/bin:/bin"}, FileSizeBytes: fsize, DiskBytes: disk})
	return c
}

// A 4 GiB file in the workspace is copied without the agent holding it in
// memory: it is the sandbox's PID 1, and reading the file whole could get
// it OOM-killed with the whole sandbox. The copy has the source's size,
// content and mode, and stays sparse instead of filling the disk.
func TestCopyOfHugeFileStreamsAndStaysSparse(t *testing.T) {
	const size = 4 << 30
	dir := t.TempDir()
	f, err := os.OpenFile(filepath.Join(dir, "big"), os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("head"), 0)
	f.WriteAt([]byte("middle"), size/2)
	f.WriteAt([]byte("tail"), size-4)
	f.Close()
	c := pairLimits(t, dir, 0, 0)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var e wire.Entry
	if err := c.Do(context.Background(), "fs.copy", wire.FSMoveRequest{From: "big", To: "sub/copy"}, &e); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Errorf("copying a %d byte file allocated %d bytes: the copy is not streamed", size, grew)
	}
	if e.Size != size {
		t.Errorf("reply size %d, want %d", e.Size, size)
	}
	cp, err := os.Open(filepath.Join(dir, "sub/copy"))
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	fi, err := cp.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != size || fi.Mode().Perm() != 0o640 {
		t.Errorf("copy is %d bytes mode %v, want %d bytes mode 0640", fi.Size(), fi.Mode().Perm(), size)
	}
	for off, want := range map[int64]string{0: "head", size / 2: "middle", size - 4: "tail", size / 4: "\x00\x00\x00\x00"} {
		got := make([]byte, len(want))
		if _, err := cp.ReadAt(got, off); err != nil || string(got) != want {
			t.Errorf("at %d: %q %v, want %q", off, got, err, want)
		}
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Blocks*512 > 64<<20 {
		t.Errorf("the copy takes %d bytes on disk: its holes were filled", st.Blocks*512)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "sub", ".sbx-tmp-*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// A copy that would pass the disk quota or the file-size limit fails with
// the quota code and leaves no destination or temporary file behind; an
// existing destination is kept as it was.
func TestCopyPastTheLimitsIsAQuotaError(t *testing.T) {
	for _, tc := range []struct {
		name        string
		fsize, disk int64
		to          string
	}{
		{"full disk quota", 0, 1 << 20, "copy"},
		{"full disk quota over a file", 0, 1 << 20, "keep"},
		{"file size limit", 256 << 10, 0, "copy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "src"), bytes.Repeat([]byte("x"), 600<<10), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "keep"), []byte("old"), 0o644); err != nil {
				t.Fatal(err)
			}
			c := pairLimits(t, dir, tc.fsize, tc.disk)
			err := c.Do(context.Background(), "fs.copy", wire.FSMoveRequest{From: "src", To: tc.to, Overwrite: true}, nil)
			if code := wireCode(err); code != wire.CodeQuota {
				t.Fatalf("copy: %v, want a %s error", err, wire.CodeQuota)
			}
			if _, err := os.Stat(filepath.Join(dir, "copy")); err == nil {
				t.Error("the refused copy was made")
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "keep")); string(b) != "old" {
				t.Errorf("the existing file now holds %d bytes, want it untouched", len(b))
			}
			if left, _ := filepath.Glob(filepath.Join(dir, ".sbx-tmp-*")); len(left) > 0 {
				t.Errorf("temporary files left: %v", left)
			}
		})
	}
}
