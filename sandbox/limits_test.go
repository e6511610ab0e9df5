package sandbox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/driver"
	"github.com/sandboxkit/sandboxkit/sandbox/local"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// reworded is the local backend with every control's Mechanism replaced by
// other words, as a backend's maintainer might rephrase them: the words
// are for people, so enforcement must not change with them.
type reworded struct{ driver.Driver }

func (d reworded) Start(ctx context.Context, cfg driver.Config) (driver.Instance, error) {
	inst, err := d.Driver.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return rewordedInstance{inst}, nil
}

type rewordedInstance struct{ driver.Instance }

func (i rewordedInstance) Isolation() driver.Isolation {
	iso := i.Instance.Isolation()
	iso.Controls = append([]driver.Control(nil), iso.Controls...)
	for k := range iso.Controls {
		iso.Controls[k].Mechanism = "enforced (reworded for this test)"
	}
	return iso
}

// TestMechanismWordsDoNotDecideRlimits: the CPU limit that the agent sets
// on each command holds when the backend words its mechanism differently.
// It was decided by looking for "RLIMIT_" in the words, so rewording them
// let a CPU spin run to its timeout.
func TestMechanismWordsDoNotDecideRlimits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := sandbox.New(ctx, sandbox.WithDriver(reworded{local.New()}), sandbox.WithLimits(sandbox.Limits{CPUSeconds: 1}))
	if err != nil {
		if sandbox.CodeOf(err) == sandbox.CodeIsolationUnavailable {
			sandboxtest.Unavailable(t, "namespace", "the default sandbox cannot be created: "+err.Error())
		}
		t.Fatal(err)
	}
	defer sb.Close()
	for _, c := range sb.Info().Controls {
		if c.Name == "cpu" && (strings.Contains(c.Mechanism, "RLIMIT") || c.Rlimit != driver.RlimitCPU || !c.SetByAgent) {
			t.Fatalf("cpu control = %+v; want reworded words and RLIMIT_CPU set by the agent as data", c)
		}
	}
	res, err := sb.Commands.Run(ctx, sandbox.Command{Args: []string{"sh", "-c", "while :; do :; done"}, Timeout: 30 * time.Second})
	if err != nil && sandbox.CodeOf(err) != sandbox.CodeTimeout {
		t.Fatal(err)
	}
	if res == nil || res.TimedOut || (res.Signal != "SIGKILL" && res.Signal != "SIGXCPU") {
		t.Fatalf("a CPU spin under Limits.CPUSeconds=1 ended with %+v, %v; want it killed by RLIMIT_CPU (SIGXCPU or SIGKILL) long before its 30 s timeout", res, err)
	}
}

// TestLimitsAreValidated: a negative limit, or an open-file limit too low
// for the agent that runs under it too, is refused with a message naming
// the field, not dropped as "no limit".
func TestLimitsAreValidated(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		limits sandbox.Limits
		say    string
	}{
		{sandbox.Limits{OpenFiles: -1}, "Limits.OpenFiles is negative"},
		{sandbox.Limits{OpenFiles: sandbox.MinOpenFiles - 1}, "MinOpenFiles"},
		{sandbox.Limits{CPUSeconds: -5}, "Limits.CPUSeconds is negative"},
		{sandbox.Limits{MemoryBytes: -1}, "Limits.MemoryBytes is negative"},
	} {
		sb, err := sandbox.New(ctx, sandbox.WithLimits(tc.limits))
		if err == nil {
			sb.Close()
		}
		if sandbox.CodeOf(err) != sandbox.CodeInvalidArgument || !strings.Contains(err.Error(), tc.say) {
			t.Errorf("New with %+v = %v; want SBX_INVALID_ARGUMENT saying %q", tc.limits, err, tc.say)
		}
	}
}
