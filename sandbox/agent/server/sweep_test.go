//go:build unix

package server

import (
	"fmt"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// A sweep of dead writers' temporary files (each agent runs one as it
// starts, on a workspace other sandboxes may be writing to) never takes
// the temporary file of a write in progress: every write lands. A writer
// used to release its lock when it closed the file, before renaming it
// into place; a sweep in that window removed it, and the write failed
// with NOT_FOUND (seen when the fake sandbox's Workspace connection
// started while the sandbox wrote).
func TestSweepNeverTakesTheFileOfAWriteInProgress(t *testing.T) {
	dir := t.TempDir()
	w, err := openWorkspace(wire.Hello{Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	stop := make(chan struct{})
	swept := make(chan struct{})
	go func() {
		defer close(swept)
		for {
			select {
			case <-stop:
				return
			default:
			}
			w.sweepTemps(stop)
		}
	}()
	failed := 0
	for i := range 1000 {
		if _, e := w.write(wire.FSWriteRequest{Path: fmt.Sprintf("d/f%d.txt", i%5), Data: []byte("data")}); e != nil {
			failed++
			if failed < 4 {
				t.Errorf("write %d while sweeps run: %v", i, e)
			}
		}
	}
	close(stop)
	<-swept
	if failed > 0 {
		t.Fatalf("%d of 1000 writes failed while sweeps ran", failed)
	}
}
