package fake_test

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/fake"
	"github.com/sandboxkit/sandboxkit/sandbox/local"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

func TestMain(m *testing.M) {
	// The comparison tests also start real local sandboxes, whose agent is
	// this test binary re-executed.
	local.RunStage()
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/sandboxkit/sandboxkit/sandbox/local/isolate.OnLauncherThread.func1.1"))
}

// scriptFileCommands teaches a fake the few commands the file part of the
// contract suite runs to look at the workspace from "inside": cat, printf
// into a file, ln -s, echo, and running a workspace script made of echo
// lines (only when its mode is executable, as exec would require).
func scriptFileCommands(fk *fake.Fake) {
	s := fk.Script
	s.CommandFunc(fake.Regexp(`^cat \S+$`), func(_ context.Context, e fake.Exec) fake.Reply {
		data, err := e.Workspace.ReadFile(e.Args[1])
		if err != nil {
			return fake.Reply{Stderr: "cat: " + e.Args[1] + ": No such file or directory\n", ExitCode: 1}
		}
		return fake.Reply{Stdout: string(data)}
	})
	printf := regexp.MustCompile(`^printf (\S+) > (\S+)$`)
	s.CommandFunc(fake.Regexp(printf.String()), func(_ context.Context, e fake.Exec) fake.Reply {
		m := printf.FindStringSubmatch(e.Text)
		if err := e.Workspace.WriteFile(m[2], []byte(m[1]), 0); err != nil {
			return fake.Reply{Stderr: err.Error(), ExitCode: 1}
		}
		return fake.Reply{}
	})
	s.CommandFunc(fake.Regexp(`^ln -s \S+ \S+$`), func(_ context.Context, e fake.Exec) fake.Reply {
		if err := e.Workspace.Symlink(e.Args[2], e.Args[3]); err != nil {
			return fake.Reply{Stderr: err.Error(), ExitCode: 1}
		}
		return fake.Reply{}
	})
	s.CommandFunc(fake.Regexp(`^echo `), func(_ context.Context, e fake.Exec) fake.Reply {
		return fake.Reply{Stdout: strings.Join(e.Args[1:], " ") + "\n"}
	})
	s.CommandFunc(fake.Regexp(`^\./\S+$`), func(_ context.Context, e fake.Exec) fake.Reply {
		mode, err := e.Workspace.Mode(e.Args[0])
		if err != nil {
			return fake.Reply{Stderr: err.Error(), ExitCode: 127}
		}
		if mode&0o100 == 0 {
			return fake.Reply{Stderr: e.Args[0] + ": Permission denied\n", ExitCode: 126}
		}
		src, _ := e.Workspace.ReadFile(e.Args[0])
		var out strings.Builder
		for _, line := range strings.Split(string(src), "\n") {
			if rest, ok := strings.CutPrefix(line, "echo "); ok {
				out.WriteString(rest + "\n")
			}
		}
		return fake.Reply{Stdout: out.String()}
	})
}

// TestContractFiles runs the file part of the contract suite on the fake.
// The other groups are about processes, limits and lifecycle of a real
// boundary, which the fake does not have: the factory skips them by name.
func TestContractFiles(t *testing.T) {
	sandboxtest.RunContract(t, func(t *testing.T, opts ...sandbox.Option) *sandbox.Sandbox {
		if !strings.Contains(t.Name(), "/Files/") {
			t.Skip("the fake backend executes nothing: only the file part of the contract applies")
		}
		sb, fk := fake.New(t, fake.WithSandboxOptions(opts...))
		scriptFileCommands(fk)
		return sb
	})
}
