package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/docker"
	"github.com/sandboxkit/sandboxkit/sandbox/kubernetes"
	"github.com/sandboxkit/sandboxkit/sandbox/local"
	"github.com/sandboxkit/sandboxkit/sandbox/local/isolate"
)

// signalNumber maps a signal name such as "SIGKILL", as the sandbox
// reports it, to its number (9 when unknown: the command was killed). The
// sandbox is Linux whatever the host runs, so the numbers are Linux's
// (they differ on macOS, and Windows has none).
func signalNumber(name string) int {
	if n, ok := linuxSignals[name]; ok {
		return n
	}
	return linuxSignals["SIGKILL"]
}

// linuxSignals numbers Linux's signals (signal(7), x86 and arm).
var linuxSignals = map[string]int{
	"SIGHUP": 1, "SIGINT": 2, "SIGQUIT": 3, "SIGILL": 4, "SIGTRAP": 5, "SIGABRT": 6, "SIGBUS": 7, "SIGFPE": 8,
	"SIGKILL": 9, "SIGUSR1": 10, "SIGSEGV": 11, "SIGUSR2": 12, "SIGPIPE": 13, "SIGALRM": 14, "SIGTERM": 15,
	"SIGSTKFLT": 16, "SIGCHLD": 17, "SIGCONT": 18, "SIGSTOP": 19, "SIGTSTP": 20, "SIGTTIN": 21, "SIGTTOU": 22,
	"SIGURG": 23, "SIGXCPU": 24, "SIGXFSZ": 25, "SIGVTALRM": 26, "SIGPROF": 27, "SIGWINCH": 28, "SIGIO": 29,
	"SIGPWR": 30, "SIGSYS": 31,
}

func runDoctor(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlags("doctor", "[--k8s k8s://NAMESPACE?image=IMAGE]", "Report what this machine can enforce, one line per capability, and which tier\nsandbox.New picks. Exits 0 when a sandbox can be created with the default (strict) settings.\nWith --k8s, also report that cluster (RBAC, NetworkPolicy enforcement; starts one pod).", stdout)
	k8sSpec := fs.String("k8s", "", "also check this Kubernetes backend (`k8s://NAMESPACE?image=IMAGE`)")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	if *k8sSpec != "" {
		ok, err := doctorK8s(ctx, *k8sSpec, stdout)
		if err != nil {
			return err
		}
		if !ok {
			defer func() { err = exitError{exitFailure} }()
		}
	}
	caps := isolate.Probe()
	for _, c := range caps.List() {
		state := "no "
		if c.Available {
			state = "yes"
		}
		fmt.Fprintf(stdout, "%-16s %s  %s\n", c.Name, state, c.Description)
	}
	fmt.Fprintf(stdout, "%-16s %s\n", "best buildable", caps.Best)
	doctorSockets(stdout, caps)
	doctorDocker(ctx, stdout)
	sb, err := sandbox.New(ctx)
	if err != nil {
		fmt.Fprintf(stdout, "%-16s fails: %v\n", "sandbox.New", err)
		if sb2, err2 := sandbox.New(ctx, sandbox.AllowWeaker(sandbox.TierLandlock, sandbox.TierProcess)); err2 == nil {
			fmt.Fprintf(stdout, "%-16s %s (with --allow-weaker=landlock,process)\n", "weaker", sb2.Info().Isolation)
			sb2.Close()
		}
		return exitError{exitFailure}
	}
	fmt.Fprintf(stdout, "%-16s picks %s\n", "sandbox.New", sb.Info().Isolation)
	fmt.Fprintf(stdout, "%-16s %v\n", "python3", sb.Info().Python)
	return sb.Close()
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("demo", "[--allow-domain NAME]...", "Create a sandbox, run a command, write and read a file, start and poll a job,\nshow that a listener on the host's loopback is out of reach (and, with\n--allow-domain, the egress proxy refusing a name not on the list), show the\nisolation in force and tear down, printing each step.", stdout)
	var domains domainsFlag
	fs.Var(&domains, "allow-domain", allowDomainUsage)
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	step := func(n int, what, detail string) { fmt.Fprintf(stdout, "%d. %-10s %s\n", n, what, detail) }
	opts := []sandbox.Option{sandbox.AllowWeaker(sandbox.TierLandlock, sandbox.TierProcess)}
	if len(domains) > 0 {
		opts = append(opts, sandbox.WithEgress(sandbox.EgressPolicy{Allow: domains}))
	}
	sb, err := sandbox.New(ctx, opts...)
	if err != nil {
		return err
	}
	defer sb.Close()
	info := sb.Info()
	step(1, "create", fmt.Sprintf("%s (%s)", sb.ID(), describeIsolation(info)))
	res, err := sb.Commands.Run(ctx, sandbox.Command{Shell: "echo hello from $(uname -s)"})
	if err != nil {
		return err
	}
	step(2, "run", fmt.Sprintf("echo hello from $(uname -s) -> exit %d, stdout %q", res.ExitCode, res.Stdout))
	if err := sb.Files.Write(ctx, "notes.txt", []byte("written by sandboxkit demo\n"), 0); err != nil {
		return err
	}
	step(3, "write", "notes.txt")
	fc, err := sb.Files.Read(ctx, "notes.txt", sandbox.ReadOptions{})
	if err != nil {
		return err
	}
	step(4, "read", fmt.Sprintf("notes.txt -> %q", fc.Data))
	job, err := sb.Commands.Start(ctx, sandbox.Command{Shell: "for i in 1 2 3; do echo tick $i; sleep 0.1; done"})
	if err != nil {
		return err
	}
	step(5, "job", job.ID+" started")
	st, err := job.Wait(ctx)
	if err != nil {
		return err
	}
	out, err := job.Output(ctx, 0)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "   %-10s exit %d, output %q\n", "poll", st.ExitCode, out.Data)
	lines, err := demoNetwork(ctx, sb)
	if err != nil {
		return err
	}
	step(6, "network", lines[0])
	for _, l := range lines[1:] {
		fmt.Fprintf(stdout, "   %-10s %s\n", "", l)
	}
	step(7, "isolation", info.Isolation.String())
	for _, c := range info.Controls {
		fmt.Fprintf(stdout, "   %-18s enforced=%-5v %s\n", c.Name, c.Enforced, c.Mechanism)
	}
	for _, g := range info.Gaps {
		fmt.Fprintf(stdout, "   gap: %s\n", g)
	}
	if err := sb.Close(); err != nil {
		return err
	}
	step(8, "close", "every process ended, temporary workspace removed")
	return nil
}

func runGC(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("gc", "[--owner NAME] [--older-than DURATION] [--all]", "Remove what sandboxes left behind by programs that are gone (e.g. killed with SIGKILL\nbefore they could close them): temporary workspaces of local sandboxes, their cgroups,\nthe ownership of workspaces a root program gave to sandbox uids (every file back to\nits owner), Docker containers labelled sandboxkit=1, and\nKubernetes sandbox pods whose agent has exited (its client is gone) in the current\nkubeconfig namespace.\n\nEvery container records the machine and process that made it, and gc removes only\nthose whose process no longer runs: the sandboxes of running programs (such as a\n'sandboxkit mcp --backend docker' server's) and of other machines sharing the\nengine are listed as kept, with the reason. --owner limits gc to the sandboxes of one\nowner (sandbox.WithOwner; 'sandboxkit mcp' and 'run' label theirs with --owner).\n--all also removes the kept ones. An unreachable Docker engine is reported on\nstderr, not as a failure.", stdout)
	olderThan := fs.Duration("older-than", 0, "remove only what was created at least this long ago (e.g. 24h)")
	owner := fs.String("owner", "", "remove only the Docker sandboxes of this `owner`")
	all := fs.Bool("all", false, "also remove Docker sandboxes whose creator still runs, runs on another machine, or is unknown: this kills sandboxes in use")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	if *olderThan < 0 {
		return usagef("--older-than must not be negative, got %s", *olderThan)
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var workspaces []string
	var localErr error
	if *owner == "" {
		// Local workspaces and cgroups carry no owner: an owner's gc
		// leaves them.
		workspaces, localErr = local.GC(*olderThan)
	}
	for _, p := range workspaces {
		fmt.Fprintln(stdout, "removed workspace", p)
	}
	var hostLines []string
	if *owner == "" {
		var hostErr error
		hostLines, hostErr = local.GCHost()
		localErr = errors.Join(localErr, hostErr)
	}
	for _, l := range hostLines {
		fmt.Fprintln(stdout, l)
	}
	rep, err := docker.GC(ctx, docker.GCOptions{Owner: *owner, OlderThan: *olderThan, All: *all})
	for _, n := range rep.Removed {
		fmt.Fprintln(stdout, "removed container", n)
	}
	for _, k := range rep.Kept {
		fmt.Fprintf(stdout, "kept container %s (owner %q): %s\n", k.Name, k.Owner, k.Reason)
	}
	if docker.IsUnreachable(err) {
		fmt.Fprintln(stderr, "gc: no Docker engine reachable, no containers checked:", err)
		err = nil
	}
	npods, k8sErr := gcK8s(ctx, kubernetes.GCOptions{Owner: *owner, OlderThan: *olderThan, All: *all}, stdout, stderr)
	if err := errors.Join(localErr, err, k8sErr); err != nil {
		return err
	}
	if len(workspaces)+len(hostLines)+len(rep.Removed)+len(rep.Kept)+npods == 0 {
		fmt.Fprintln(stdout, "nothing to clean")
	} else if len(rep.Kept) > 0 {
		fmt.Fprintln(stdout, "kept containers are in use or not this machine's to judge; --all removes them too")
	}
	return nil
}
