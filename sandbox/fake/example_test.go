package fake_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox/fake"
	"github.com/sandboxkit/sandboxkit/toolkit"
)

// exampleT stands in for the *testing.T an Example does not have; in a test, pass t.
type exampleT struct {
	testing.TB
	cleanups []func()
}

func (t *exampleT) Helper()          {}
func (t *exampleT) Cleanup(f func()) { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Errorf(format string, args ...any) {
	fmt.Printf("test error: "+format+"\n", args...)
}
func (t *exampleT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (t *exampleT) end() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}

// A unit test of an agent's tools, offline: the script answers the command the model is
// expected to run, and the record shows what ran and under which policy.
func Example() {
	t := &exampleT{} // in a test: func TestRunsTheTests(t *testing.T) { ... }
	defer t.end()

	sb, fk := fake.New(t)
	fk.Script.Command(fake.Exact("go test ./..."), fake.Reply{Stdout: "ok  \texample.com/app\t0.01s\n"})
	kit := toolkit.ForSandbox(sb)

	// What the code under test does when the model asks for run_command:
	res, err := kit.Call(context.Background(), "run_command", json.RawMessage(`{"command":"go test ./..."}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(res.IsError)

	for _, c := range fk.CallsOf(fake.KindCommand) {
		fmt.Printf("ran %q, scripted %v, network %v\n", c.Text, c.Scripted, c.Policy.Network)
	}
	// Output:
	// false
	// ran "go test ./...", scripted true, network false
}
