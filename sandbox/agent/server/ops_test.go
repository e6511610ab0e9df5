//go:build linux

package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// Every operation of the protocol's list is in the server's table and
// decodes its arguments there: arguments of the wrong shape get
// INVALID_ARGUMENT naming the operation (not "unknown operation"), and the
// agent serves the next request.
func TestEveryOperationDecodesItsArguments(t *testing.T) {
	c, _ := pair(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	names := []string{wire.OpPing.Name, wire.OpExec.Name, wire.OpJobOutput.Name, wire.OpJobStatus.Name, wire.OpJobWait.Name,
		wire.OpJobKill.Name, wire.OpJobStdin.Name, wire.OpJobList.Name, wire.OpJobRemove.Name,
		wire.OpFSRead.Name, wire.OpFSWrite.Name, wire.OpFSEdit.Name, wire.OpFSStat.Name, wire.OpFSList.Name,
		wire.OpFSMkdir.Name, wire.OpFSMove.Name, wire.OpFSCopy.Name, wire.OpFSRemove.Name, wire.OpFSChmod.Name,
		wire.OpFSSearch.Name, wire.OpFSGlob.Name, wire.OpFSCopyIn.Name, wire.OpFSCopyOut.Name}
	for _, op := range names {
		err := c.Do(ctx, op, json.RawMessage(`7`), nil)
		if wireCode(err) != wire.CodeInvalidArgument || !strings.Contains(err.Error(), "bad arguments for "+op) {
			t.Errorf("%s with arguments 7: %v; want INVALID_ARGUMENT \"bad arguments for %s\"", op, err, op)
		}
	}
	if err := c.Do(ctx, "fs.nosuch", nil, nil); wireCode(err) != wire.CodeInvalidArgument || !strings.Contains(err.Error(), `unknown operation "fs.nosuch"`) {
		t.Errorf("an unknown operation: %v", err)
	}
	if err := c.Do(ctx, wire.OpPing.Name, nil, nil); err != nil {
		t.Fatalf("ping after the bad requests: %v", err)
	}
}
