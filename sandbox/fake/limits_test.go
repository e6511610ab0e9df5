package fake_test

import (
	"context"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/fake"
)

// TestEveryLimitCanBeSetOnTheFake: a program that sets Limits.OpenFiles
// (as it would for a real backend) gets a fake sandbox, and each call
// records the limit in its Policy.
func TestEveryLimitCanBeSetOnTheFake(t *testing.T) {
	sb, fk := fake.New(t, fake.WithSandboxOptions(sandbox.WithLimits(sandbox.Limits{OpenFiles: 128})))
	fk.Script.Command(fake.Exact("ls"), fake.Reply{})
	if _, err := sb.Commands.Run(context.Background(), sandbox.Command{Shell: "ls"}); err != nil {
		t.Fatal(err)
	}
	if cmds := fk.CallsOf(fake.KindCommand); len(cmds) != 1 || cmds[0].Policy.Limits.OpenFiles != 128 {
		t.Errorf("recorded %+v, want the command with Limits.OpenFiles 128 in its policy", cmds)
	}
}
