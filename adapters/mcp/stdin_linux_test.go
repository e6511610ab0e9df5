package mcp

import (
	"io"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestReopenedPipeIsPollableAndLeavesTheOriginalAlone: standard input that
// is a pipe in blocking mode (what a client hands its server) is reopened as
// a pollable file, so that Read reads it and Close interrupts it; the
// original descriptor stays blocking, so nothing that shares it sees
// EAGAIN.
func TestReopenedPipeIsPollableAndLeavesTheOriginalAlone(t *testing.T) {
	var fds [2]int
	if err := syscall.Pipe(fds[:]); err != nil { // blocking, like a client's pipe
		t.Fatal(err)
	}
	orig, w := os.NewFile(uintptr(fds[0]), "stdin"), os.NewFile(uintptr(fds[1]), "client")
	defer orig.Close()
	defer w.Close()
	if orig.SetReadDeadline(time.Time{}) == nil {
		t.Fatal("test setup: the blocking pipe is pollable already")
	}
	f := reopenPipe(fds[0])
	if f == nil {
		t.Fatal("a pipe was not reopened")
	}
	c, err := (&LineTransport{In: f, Out: io.Discard}).Connect(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if c.(*lineConn).direct == nil {
		t.Fatal("the reopened pipe is read from a goroutine")
	}
	io.WriteString(w, `{"jsonrpc":"2.0","id":1,"method":"ping"}`+"\n")
	if msg, err := c.Read(t.Context()); err != nil || msg == nil {
		t.Fatalf("reading what the client wrote: %v %v", msg, err)
	}
	flags, err := unix.FcntlInt(uintptr(fds[0]), unix.F_GETFL, 0)
	if err != nil || flags&unix.O_NONBLOCK != 0 {
		t.Errorf("the original descriptor's flags %#x (%v): O_NONBLOCK set on a description others share", flags, err)
	}
	done := make(chan error, 1)
	go func() { _, err := c.Read(t.Context()); done <- err }()
	time.Sleep(10 * time.Millisecond)
	c.Close()
	select {
	case err := <-done:
		if err != io.EOF {
			t.Errorf("Read after Close: %v, want io.EOF", err)
		}
	case <-time.After(bound):
		t.Fatal("Close did not interrupt a Read of the reopened pipe")
	}

	// Not a pipe: nothing to reopen.
	file, err := os.CreateTemp(t.TempDir(), "f")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if reopenPipe(int(file.Fd())) != nil {
		t.Error("a regular file was reopened as a pipe")
	}
}
