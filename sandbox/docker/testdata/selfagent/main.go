// Command selfagent is a user's program in miniature for the docker
// backend's tests: built static, it starts a sandbox without naming an agent
// binary, so the backend must copy the program itself in, and the docker
// package's init hook must turn it into the agent inside the container.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/agent"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
	"github.com/sandboxkit/sandboxkit/sandbox/docker"
	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "selfagent:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := docker.New(docker.WithImage(os.Args[1]), docker.WithPull(docker.PullNever))
	defer d.Close()
	inst, err := d.Start(ctx, driver.Config{ID: "selfagent-" + fmt.Sprint(os.Getpid()), Owner: "sandboxkit-docker-test"})
	if err != nil {
		return err
	}
	defer inst.Close(context.Background())
	cl, err := agent.Dial(ctx, inst.Conn(), wire.Hello{Workspace: inst.Isolation().WorkspacePath, Env: []string{"PATH=/usr/bin:/bin"}})
	if err != nil {
		return err
	}
	defer cl.Close()
	var out bytes.Buffer
	call, err := cl.Start("exec", wire.ExecRequest{Args: []string{"sh", "-c", "tr '\\0' ' ' </proc/1/cmdline"}, TimeoutMs: 10000},
		agent.Handlers{OnData: func(_ wire.FrameType, b []byte) { out.Write(b) }})
	if err != nil {
		return err
	}
	raw, err := call.WaitContext(ctx)
	if err != nil {
		return err
	}
	var rep wire.ExecReply
	if err := json.Unmarshal(raw, &rep); err != nil {
		return err
	}
	fmt.Printf("source=%s\npid1=%s\nexit=%d\n", inst.Isolation().Extra["agent"], out.String(), rep.ExitCode)
	return nil
}
