package main

import (
	"context"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox/fake"
	"github.com/sandboxkit/sandboxkit/toolkit"
)

func TestFindTodosOffline(t *testing.T) {
	sb, fk := fake.New(t) // closed, and checked for unscripted calls, when the test ends
	fk.Script.Command(fake.Exact("grep -rn TODO ."), fake.Reply{
		Stdout: "./main.py:1:print('hi')  # TODO: greet by name\n",
	})
	fk.Script.Command(fake.Exact("grep -rn TODO empty"), fake.Reply{ExitCode: 1})

	kit := toolkit.Of(findTodos(sb))
	res, err := kit.Call(context.Background(), "find_todos", []byte(`{}`))
	if err != nil || res.IsError || !strings.Contains(res.Text, "1 TODOs:\n./main.py:1:") {
		t.Fatalf("find_todos: %+v, %v", res, err)
	}
	res, _ = kit.Call(context.Background(), "find_todos", []byte(`{"dir":"empty"}`))
	if res.Text != "no TODOs" {
		t.Fatalf("find_todos in an empty dir: %q", res.Text)
	}

	// The tool kept its list in the workspace.
	if saved, _ := fk.Workspace().ReadFile("todo.txt"); !strings.Contains(string(saved), "greet by name") {
		t.Fatalf("todo.txt holds %q", saved)
	}
	// Every command was recorded with the policy it ran under.
	cmds := fk.CallsOf(fake.KindCommand)
	if len(cmds) != 2 || cmds[0].Policy.Network || cmds[0].Policy.Timeout.Seconds() != 30 {
		t.Fatalf("recorded commands: %+v", cmds)
	}
}
