package docker_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/docker"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// TestPoolUnderLoad is issue 22's load test on Docker
// (sandboxtest.RunPoolLoad): 50 concurrent Gets on a pool of 8, and after
// Close the engine holds no container of the pool's, running or stopped
// (the workspace is a tmpfs of the container, so none is left either).
func TestPoolUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 58 containers; skipped with -short")
	}
	d := testDriver(t)
	cli, err := d.Client()
	if err != nil {
		t.Fatal(err)
	}
	// An owner of this run's own, so that the count is of this pool's
	// containers only.
	owner := fmt.Sprintf("sandboxkit-docker-pooltest-%d-%d", os.Getpid(), time.Now().UnixNano())
	sandboxtest.RunPoolLoad(t, sandboxtest.PoolLoadOptions{Size: 8, Callers: 50, Timeout: 10 * time.Minute,
		Leftovers: func() []string {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", docker.LabelOwner+"="+owner))})
			if err != nil {
				return []string{"cannot list the engine's containers: " + err.Error()}
			}
			var left []string
			for _, c := range list {
				left = append(left, fmt.Sprintf("container %s of sandbox %s (%s)", c.ID[:12], c.Labels[docker.LabelID], c.State))
			}
			return left
		}}, sandbox.WithDriver(d), sandbox.WithOwner(owner))
}
