package docker_test

import (
	"context"
	"io"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// The benchmarks compare the public API against the floor in the same run
// (sandboxtest.CompareWithFloors alternates them, so both see the same
// machine), through the same engine client library:
//
//	go test ./sandbox/docker -run '^$' -bench . -benchtime 20x
//
// x-docker-exec is the target: a command must cost at most a
// tenth of a `docker exec` (x-docker-exec <= 0.1).

// BenchmarkCreate is sandbox.New and a first command, Commands.Run("true")
// (Close is not timed), against `docker run --rm IMAGE true`, which returns
// once the container has exited and been removed: plain, as users run it,
// and with --network none, as the sandbox runs (the network namespace's
// teardown costs the engine 80-150 ms here; the README's ratio is against
// the plain run).
func BenchmarkCreate(b *testing.B) {
	d := testDriver(b)
	cli, err := d.Client()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	sandboxtest.CompareWithFloors(b, func(b *testing.B) func() {
		sb, err := sandbox.New(ctx, sandbox.WithDriver(d), sandbox.WithOwner("sandboxkit-docker-bench"))
		if err != nil {
			b.Fatal(err)
		}
		if res, err := sb.Commands.Run(ctx, sandbox.Command{Args: []string{"true"}}); err != nil || res.ExitCode != 0 {
			b.Fatalf("%+v %v", res, err)
		}
		return func() { sb.Close() }
	}, sandboxtest.Floor{Name: "docker-run-rm-true", Run: func(b *testing.B) func() {
		dockerRunTrue(b, cli, "")
		return nil
	}}, sandboxtest.Floor{Name: "docker-run-rm-network-none-true", Run: func(b *testing.B) func() {
		dockerRunTrue(b, cli, "none")
		return nil
	}})
}

// BenchmarkCommand is Commands.Run("true") in a running sandbox against
// `docker exec CONTAINER true` in the same container.
func BenchmarkCommand(b *testing.B) {
	d := testDriver(b)
	cli, err := d.Client()
	if err != nil {
		b.Fatal(err)
	}
	sb := newSandbox(b)
	id := sb.Info().Extra["container_id"]
	if id == "" {
		b.Fatal("Info().Extra has no container_id")
	}
	ctx := context.Background()
	sandboxtest.CompareWithFloors(b, func(b *testing.B) func() {
		res, err := sb.Commands.Run(ctx, sandbox.Command{Args: []string{"true"}})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("%+v %v", res, err)
		}
		return nil
	}, sandboxtest.Floor{Name: "docker-exec", Run: func(b *testing.B) func() {
		dockerExecTrue(b, cli, id)
		return nil
	}})
}

// dockerRunTrue does what `docker run --rm [--network NETWORK] IMAGE true`
// does: create, attach, start, read to the end, wait for the removal.
// network "" is the engine's default, as without the flag.
func dockerRunTrue(b *testing.B, cli *client.Client, network string) {
	ctx := context.Background()
	c, err := cli.ContainerCreate(ctx, &container.Config{Image: testImage(), Cmd: []string{"true"}, AttachStdout: true, AttachStderr: true},
		&container.HostConfig{AutoRemove: true, NetworkMode: container.NetworkMode(network)}, nil, nil, "")
	if err != nil {
		b.Fatal(err)
	}
	hj, err := cli.ContainerAttach(ctx, c.ID, container.AttachOptions{Stream: true, Stdout: true, Stderr: true})
	if err != nil {
		b.Fatal(err)
	}
	defer hj.Close()
	waitC, errC := cli.ContainerWait(ctx, c.ID, container.WaitConditionRemoved)
	if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
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

// dockerExecTrue does what `docker exec ID true` does: create, attach,
// read to the end, inspect the exit code.
func dockerExecTrue(b *testing.B, cli *client.Client, id string) {
	ctx := context.Background()
	ex, err := cli.ContainerExecCreate(ctx, id, container.ExecOptions{Cmd: []string{"true"}, AttachStdout: true, AttachStderr: true})
	if err != nil {
		b.Fatal(err)
	}
	hj, err := cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, hj.Reader)
	hj.Close()
	ins, err := cli.ContainerExecInspect(ctx, ex.ID)
	if err != nil || ins.ExitCode != 0 || ins.Running {
		b.Fatalf("exec: %+v, %v", ins, err)
	}
}

// BenchmarkPoolGetAndFirstCommand is Pool.Get plus a first command against
// sandbox.New plus a first command (cold) and against the command in a
// sandbox already held (warm), in the same run (sandboxtest.ComparePoolGet;
// issue 22's target: pooled Docker <= 20 ms).
func BenchmarkPoolGetAndFirstCommand(b *testing.B) {
	d := testDriver(b)
	sandboxtest.ComparePoolGet(b, sandbox.PoolConfig{Size: 4}, sandbox.WithDriver(d), sandbox.WithOwner("sandboxkit-docker-bench"))
}
