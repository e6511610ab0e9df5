package sandbox

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox/agent"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// TestEveryCodeIsReexported reads errors.go: each code of driver's list
// must have a sandbox.CodeX constant naming it and an ErrX sentinel, so a
// code added to the list reaches users of this package too.
func TestEveryCodeIsReexported(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}  // CodeX -> driver.CodeX
	sentinels := map[string]bool{} // CodeX with an ErrX = &Error{Code: CodeX}
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || len(vs.Values) != 1 {
			return true
		}
		name := vs.Names[0].Name
		switch v := vs.Values[0].(type) {
		case *ast.SelectorExpr:
			if x, ok := v.X.(*ast.Ident); ok && x.Name == "driver" && strings.HasPrefix(name, "Code") {
				consts[name] = v.Sel.Name
			}
		case *ast.UnaryExpr:
			if lit, ok := v.X.(*ast.CompositeLit); ok && strings.HasPrefix(name, "Err") && len(lit.Elts) == 1 {
				if kv, ok := lit.Elts[0].(*ast.KeyValueExpr); ok {
					if id, ok := kv.Value.(*ast.Ident); ok && id.Name == "Code"+strings.TrimPrefix(name, "Err") {
						sentinels[id.Name] = true
					}
				}
			}
		}
		return true
	})
	for name, sel := range consts {
		if name != sel {
			t.Errorf("sandbox.%s re-exports driver.%s: use the same name", name, sel)
		}
	}
	for _, c := range driver.Codes() {
		name := goName(c.Code)
		if _, ok := consts[name]; !ok {
			t.Errorf("driver lists %s but sandbox does not re-export it: add %s = driver.%s to errors.go", c.Code, name, name)
		}
		if !sentinels[name] {
			t.Errorf("driver lists %s but sandbox has no sentinel: add Err%s = &Error{Code: %s}", c.Code, strings.TrimPrefix(name, "Code"), name)
		}
		err := fmt.Errorf("wrapped: %w", &Error{Code: c.Code, Op: "X", Message: "m"})
		if CodeOf(err) != c.Code || !errors.Is(err, &Error{Code: c.Code}) {
			t.Errorf("CodeOf or errors.Is lost %s", c.Code)
		}
	}
	if len(consts) != len(driver.Codes()) {
		t.Errorf("sandbox re-exports %d codes, driver lists %d", len(consts), len(driver.Codes()))
	}
}

// goName is the Go name of a code: SBX_NOT_FOUND -> CodeNotFound.
func goName(c Code) string {
	var b strings.Builder
	b.WriteString("Code")
	for _, w := range strings.Split(strings.TrimPrefix(string(c), "SBX_"), "_") {
		b.WriteString(w[:1] + strings.ToLower(w[1:]))
	}
	return b.String()
}

// TestBackendErrorKeepsItsCode: a backend's *driver.Error reaches the
// caller with its code as is; a code not in the list (a backend written
// against the old short form, "BACKEND") is reported as the backend's bug
// rather than passed on as a code no caller can match.
func TestBackendErrorKeepsItsCode(t *testing.T) {
	err := wrapErr("New", driver.Errorf(driver.CodeBackend, errors.New("engine down"), "cannot reach the engine"))
	if CodeOf(err) != CodeBackend || !errors.Is(err, ErrBackend) {
		t.Errorf("driver error became %v, want SBX_BACKEND", err)
	}
	err = wrapErr("New", &driver.Error{Code: "BACKEND", Message: "cannot reach the engine"})
	if CodeOf(err) != CodeInternal || !strings.Contains(err.Error(), `unknown error code "BACKEND"`) || !strings.Contains(err.Error(), "cannot reach the engine") {
		t.Errorf("unknown code became %v, want SBX_INTERNAL naming the code and keeping the message", err)
	}
	// The agent's codes are the driver's too.
	err = wrapErr("Files.Read", wire.Errorf(wire.CodeNotFound, "no such file"))
	if CodeOf(err) != CodeNotFound || !errors.Is(err, ErrNotFound) {
		t.Errorf("agent error became %v, want SBX_NOT_FOUND", err)
	}
	err = wrapErr("Files.Read", &wire.WireError{Code: "FROM_THE_FUTURE", Message: "no such file"})
	if CodeOf(err) != CodeInternal || !strings.Contains(err.Error(), `unknown error code "FROM_THE_FUTURE"`) {
		t.Errorf("unknown agent code became %v, want SBX_INTERNAL naming it", err)
	}
}

// A dead agent's error leads with why it died, when the stream knows (the
// OOM killer, a crash, thread exhaustion), and says "agent is gone" once:
// the cause used to come last, after the generic text and a second "sandbox
// agent is gone", where a model reading a tool result stops reading.
func TestDeadAgentErrorLeadsWithTheCause(t *testing.T) {
	cause := "the kernel's OOM killer ended it (memory limit 64 MiB: raise Limits.MemoryBytes)"
	err := wrapErr("Commands.Run", fmt.Errorf("%w: %s", agent.ErrDead, cause))
	want := "SBX_DEAD Commands.Run: the sandbox's agent is gone: " + cause
	if msg := err.Error(); !strings.HasPrefix(msg, want) || strings.Count(msg, "gone") != 1 {
		t.Errorf("error = %q\nwant it to start %q and say \"gone\" once", msg, want)
	}
	if !errors.Is(err, ErrDead) || !errors.Is(err, agent.ErrDead) || CodeOf(err) != CodeDead {
		t.Errorf("error %v lost its code or its cause", err)
	}
	// A backend's cause that advises already is not advised twice.
	docker := "the sandbox container was killed through the Docker engine (signal 9); create a new sandbox"
	if msg := wrapErr("Files.Read", fmt.Errorf("%w: %s", agent.ErrDead, docker)).Error(); strings.Count(msg, "create a new sandbox") != 1 {
		t.Errorf("error = %q, want the advice once", msg)
	}
	// Without a cause the message stays the generic one.
	if msg := wrapErr("Commands.Run", agent.ErrDead).Error(); msg != "SBX_DEAD Commands.Run: the sandbox's agent is gone (the sandbox died or was killed); create a new sandbox" {
		t.Errorf("error without a cause = %q", msg)
	}
}
