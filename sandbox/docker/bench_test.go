package docker

import (
	"context"
	"io"
	"testing"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxkit/sandboxkit/sandbox/agent"
	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// The benchmarks compare against the floor in the same run, through the
// same client library: `docker run --rm IMAGE true` for creation and
// `docker exec` for a command in a running container.
//
//	go test ./sandbox/docker -run '^$' -bench . -benchtime 20x

func BenchmarkStart(b *testing.B) {
	d := newTestDriver(b)
	ctx := context.Background()
	b.Run("sandbox", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			inst, err := d.Start(ctx, driver.Config{ID: "bench-" + randID(), Owner: "sandboxkit-docker-bench"})
			if err != nil {
				b.Fatal(err)
			}
			cl, err := agent.Dial(ctx, inst.Conn(), agent.Hello{Workspace: workspacePath})
			if err != nil {
				b.Fatal(err)
			}
			cl.Close()
			if err := inst.Close(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("docker-run-rm-true", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			dockerRunTrue(b, d)
		}
	})
}

// dockerRunTrue does what `docker run --rm --network none IMAGE true` does.
func dockerRunTrue(b *testing.B, d *Driver) {
	ctx := context.Background()
	c, err := d.cli.ContainerCreate(ctx, &container.Config{Image: testImage(), Cmd: []string{"true"}, AttachStdout: true, AttachStderr: true},
		&container.HostConfig{AutoRemove: true, NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		b.Fatal(err)
	}
	hj, err := d.cli.ContainerAttach(ctx, c.ID, container.AttachOptions{Stream: true, Stdout: true, Stderr: true})
	if err != nil {
		b.Fatal(err)
	}
	defer hj.Close()
	waitC, errC := d.cli.ContainerWait(ctx, c.ID, container.WaitConditionRemoved)
	if err := d.cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, hj.Reader)
	select {
	case r := <-waitC:
		if r.StatusCode != 0 {
			b.Fatalf("true exited %d", r.StatusCode)
		}
	case err := <-errC:
		b.Fatal(err)
	}
}

func BenchmarkCommand(b *testing.B) {
	d := newTestDriver(b)
	s := start(b, d, driver.Config{ID: "benchcmd-" + randID()})
	ctx := context.Background()
	b.Run("sandbox-agent", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, code, err := s.exec(ctx, "true"); err != nil || code != 0 {
				b.Fatalf("exit %d, %v", code, err)
			}
		}
	})
	b.Run("docker-exec", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			dockerExecTrue(b, d, s.c.ID())
		}
	})
}

// dockerExecTrue does what `docker exec ID true` does: create, attach,
// read to the end, inspect the exit code.
func dockerExecTrue(b *testing.B, d *Driver, id string) {
	ctx := context.Background()
	ex, err := d.cli.ContainerExecCreate(ctx, id, container.ExecOptions{Cmd: []string{"true"}, AttachStdout: true, AttachStderr: true})
	if err != nil {
		b.Fatal(err)
	}
	hj, err := d.cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, hj.Reader)
	hj.Close()
	ins, err := d.cli.ContainerExecInspect(ctx, ex.ID)
	if err != nil || ins.ExitCode != 0 || ins.Running {
		b.Fatalf("exec: %+v, %v", ins, err)
	}
}
