package docker_test

import (
	"context"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/docker"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// TestSoak runs the soak (issue 17's "nothing lost, nothing left running")
// on the Docker backend: 20 sandboxes for 40 s, then no container of
// theirs may be left, running or stopped.
func TestSoak(t *testing.T) {
	sandboxtest.RunSoak(t, func(t *testing.T, opts ...sandbox.Option) *sandbox.Sandbox {
		return newSandbox(t, opts...)
	}, sandboxtest.SoakOptions{Leftovers: func(ids []string) []string {
		cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			return []string{"cannot ask the engine: " + err.Error()}
		}
		defer cli.Close()
		var out []string
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, id := range ids {
			list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", docker.LabelID+"="+id))})
			if err != nil {
				return append(out, "cannot list containers: "+err.Error())
			}
			for _, c := range list {
				out = append(out, "container "+c.ID[:12]+" of sandbox "+id+" ("+c.State+")")
			}
		}
		return out
	}})
}
