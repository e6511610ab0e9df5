package sandbox_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// TestPythonListReportsErrors: Python.List used to return nil both for "no contexts" and for
// "the sandbox is closed"; a caller could not tell an empty sandbox from a dead one.
func TestPythonListReportsErrors(t *testing.T) {
	ctx := context.Background()
	sb := sandboxtest.NewDefault(t)
	if err := sb.Python.Create(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Python.Run(ctx, "x = 1", sandbox.PythonRunOptions{Context: "a"}); err != nil {
		t.Fatal(err)
	}
	cs, err := sb.Python.List(ctx)
	if err != nil || len(cs) != 1 || cs[0].Name != "a" || cs[0].ExecutionCount != 1 || cs[0].PID <= 0 || cs[0].Version == "" {
		t.Fatalf("List = %+v, %v; want context a after one run, with its interpreter", cs, err)
	}
	sb.Close()
	if cs, err := sb.Python.List(ctx); sandbox.CodeOf(err) != sandbox.CodeClosed {
		t.Errorf("List after Close = %+v, %v; want %s", cs, err, sandbox.CodeClosed)
	}
}

// recorder keeps the audit records it is handed.
type recorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec.Clone())
	return nil
}
func (r *recorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &withAttrs{r, as}
}
func (r *recorder) WithGroup(string) slog.Handler { return r }

// withAttrs adds the attributes of Logger.With to each record, as real handlers do.
type withAttrs struct {
	*recorder
	attrs []slog.Attr
}

func (w *withAttrs) Handle(ctx context.Context, rec slog.Record) error {
	rec = rec.Clone()
	rec.AddAttrs(w.attrs...)
	return w.recorder.Handle(ctx, rec)
}

// TestAuditEventsNameTheOwner: WithOwner promised to label audit events, and the events
// carried no owner; one handler serving several callers could not tell whose sandbox acted.
func TestAuditEventsNameTheOwner(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	sb, err := sandbox.New(ctx, sandbox.WithOwner("alice"), sandbox.WithAudit(rec))
	if sandbox.CodeOf(err) == sandbox.CodeIsolationUnavailable {
		sandboxtest.Unavailable(t, "namespace", err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Files.Write(ctx, "a.txt", []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	sb.Close()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var ops int
	for _, r := range rec.records {
		owner, op := "", ""
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "owner":
				owner = a.Value.String()
			case "op":
				op = a.Value.String()
			}
			return true
		})
		if owner != "alice" {
			t.Errorf("audit event %q (%s) has owner %q, want alice", r.Message, op, owner)
		}
		ops++
	}
	if ops < 2 {
		t.Fatalf("%d audit events; want at least Files.Write and Sandbox.Close", ops)
	}
}
