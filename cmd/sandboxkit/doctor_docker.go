package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/docker"
)

// doctorDocker reports the Docker engine the docker backend would use
// (found as the docker CLI finds it): whether it answers and why not, its
// version, its runtimes with the tier each gives, and whether the default
// image is there. The docker backend is optional, so nothing here changes
// doctor's exit code.
func doctorDocker(ctx context.Context, stdout io.Writer) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	d := docker.New()
	defer d.Close()
	r, err := d.Report(ctx)
	if !r.Reachable {
		fmt.Fprintf(stdout, "%-16s no   %v\n", "docker engine", r.Err)
		return
	}
	fmt.Fprintf(stdout, "%-16s yes  %s: Docker %s (API %s), %s/%s, cgroup v%s\n", "docker engine", r.Host, r.Version, r.API, r.OS, r.Arch, r.Cgroup)
	var rts []string
	for _, rt := range r.Runtimes {
		s := fmt.Sprintf("%s (%s tier", rt.Name, rt.Tier)
		if rt.Name == r.DefaultRuntime {
			s += ", default"
		}
		rts = append(rts, s+")")
	}
	fmt.Fprintf(stdout, "%-16s %s\n", "docker runtimes", strings.Join(rts, ", "))
	if !r.Seccomp {
		fmt.Fprintf(stdout, "%-16s no   the engine applies no seccomp profile (reported as a gap)\n", "docker seccomp")
	}
	switch {
	case err != nil:
		fmt.Fprintf(stdout, "%-16s ?    %v\n", "docker image", err)
	case r.ImagePresent:
		fmt.Fprintf(stdout, "%-16s yes  %s is on the engine\n", "docker image", r.Image)
	default:
		fmt.Fprintf(stdout, "%-16s no   %s is not on the engine: the first sandbox pulls it (or: docker pull %[2]s)\n", "docker image", r.Image)
	}
}
