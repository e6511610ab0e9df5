// Command fake is the example of testing an agent's tools offline with
// sandbox/fake. main runs the agent's own tool, find_todos, once on a real
// sandbox; tool_test.go (the README's "Testing your agent offline") tests
// it against the fake sandbox, with no process, container or network.
package main

import (
	"context"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/toolkit"
)

type findTodosIn struct {
	Dir string `json:"dir,omitempty" description:"directory to search, relative to the workspace (default: the whole workspace)"`
}

type findTodosOut struct {
	Todos []string `json:"todos"`
}

func (o findTodosOut) ToolText() string {
	if len(o.Todos) == 0 {
		return "no TODOs"
	}
	return fmt.Sprintf("%d TODOs:\n%s", len(o.Todos), strings.Join(o.Todos, "\n"))
}

// findTodos is the agent's own tool: it greps the workspace for TODO
// comments and keeps the list in todo.txt for the next step of the agent.
func findTodos(sb *sandbox.Sandbox) *toolkit.Tool {
	return toolkit.New("find_todos", "List the TODO comments in the project, as file:line:text.",
		func(ctx context.Context, in findTodosIn) (findTodosOut, error) {
			dir := in.Dir
			if dir == "" {
				dir = "."
			}
			res, err := sb.Commands.Run(ctx, sandbox.Command{Args: []string{"grep", "-rn", "TODO", dir}, Timeout: 30 * time.Second})
			if err != nil {
				return findTodosOut{}, err
			}
			switch res.ExitCode {
			case 0:
			case 1: // grep found nothing
				return findTodosOut{}, nil
			default:
				return findTodosOut{}, fmt.Errorf("grep failed: %s", strings.TrimSpace(res.Stderr))
			}
			out := findTodosOut{Todos: strings.Split(strings.TrimSpace(res.Stdout), "\n")}
			if err := sb.Files.Write(ctx, "todo.txt", []byte(res.Stdout), 0); err != nil {
				return findTodosOut{}, err
			}
			return out, nil
		}, toolkit.ReadOnly())
}

func main() {
	ctx := context.Background()
	sb, err := sandbox.New(ctx, sandbox.AllowWeaker(sandbox.TierLandlock, sandbox.TierProcess))
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Close()
	if err := sb.Files.Write(ctx, "main.py", []byte("print('hi')  # TODO: greet by name\n"), 0); err != nil {
		log.Fatal(err)
	}
	res, err := toolkit.Of(findTodos(sb)).Call(ctx, "find_todos", []byte(`{}`))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Text)
}
