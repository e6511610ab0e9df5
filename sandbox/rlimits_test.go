package sandbox

import (
	"reflect"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// TestRlimitsFollowControlData: which rlimits the agent sets on each
// command follows the controls' Rlimit and SetByAgent fields and the
// limits' values, whatever the words say.
func TestRlimitsFollowControlData(t *testing.T) {
	lim := Limits{CPUSeconds: 3, MemoryBytes: 1 << 30, FileSizeBytes: 1 << 20, OpenFiles: 256, Pids: 50}
	for _, tc := range []struct {
		name string
		ctl  driver.Control
		want []wire.Rlimit
	}{
		{"set by the agent, words without RLIMIT", driver.Control{Name: "cpu", Enforced: true, Mechanism: "per command", Rlimit: driver.RlimitCPU, SetByAgent: true},
			[]wire.Rlimit{{Resource: 0, Name: "RLIMIT_CPU", Soft: 3, Hard: 4}}},
		{"set by the backend, words with RLIMIT", driver.Control{Name: "cpu", Enforced: true, Mechanism: "RLIMIT_CPU on the agent", Rlimit: driver.RlimitCPU}, nil},
		{"not enforced", driver.Control{Name: "open_files", Mechanism: "RLIMIT_NOFILE", Rlimit: driver.RlimitNOFILE, SetByAgent: true}, nil},
		{"open files", driver.Control{Name: "open_files", Enforced: true, Rlimit: driver.RlimitNOFILE, SetByAgent: true},
			[]wire.Rlimit{{Resource: 7, Name: "RLIMIT_NOFILE", Soft: 256, Hard: 256}}},
		{"memory fallback", driver.Control{Name: "memory", Enforced: true, Rlimit: driver.RlimitAS, SetByAgent: true},
			[]wire.Rlimit{{Resource: 9, Name: "RLIMIT_AS", Soft: 1 << 30, Hard: 1 << 30}}},
		{"file size", driver.Control{Name: "file_size", Enforced: true, Rlimit: driver.RlimitFSIZE, SetByAgent: true},
			[]wire.Rlimit{{Resource: 1, Name: "RLIMIT_FSIZE", Soft: 1 << 20, Hard: 1 << 20}}},
		{"no rlimit at all", driver.Control{Name: "pids", Enforced: true, Mechanism: "cgroup pids.max (not RLIMIT_NPROC)"}, nil},
	} {
		got, err := rlimitsFor(driver.Isolation{Controls: []driver.Control{tc.ctl}}, lim)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: rlimitsFor = %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	// A zero limit asks for nothing, even where the backend would leave it
	// to the agent.
	if got, err := rlimitsFor(driver.Isolation{Controls: []driver.Control{{Name: "cpu", Enforced: true, Rlimit: driver.RlimitCPU, SetByAgent: true}}}, Limits{}); err != nil || got != nil {
		t.Errorf("no CPU limit: rlimitsFor = %+v, %v; want none", got, err)
	}
	// A control enforced by an rlimit the agent cannot set would be
	// reported but not in force: refused.
	_, err := rlimitsFor(driver.Isolation{Controls: []driver.Control{{Name: "stack", Enforced: true, Rlimit: "RLIMIT_STACK", SetByAgent: true}}}, lim)
	if CodeOf(err) != CodeInternal {
		t.Errorf("an rlimit the agent cannot set: err = %v, want SBX_INTERNAL", err)
	}
}
