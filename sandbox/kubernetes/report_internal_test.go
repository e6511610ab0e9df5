package kubernetes

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// TestOpenFilesReportedOnlyWhereSet: RLIMIT_NOFILE is set by the pod's
// python3 bootstrap, which says so (SBX-NOFILE); an image without python3
// starts the agent without it, and the open_files control must then not
// be reported as enforced (it was: the report looked only at whether the
// limit was asked for). An explicit Limits.OpenFiles is then refused by
// package sandbox instead of silently not holding.
func TestOpenFilesReportedOnlyWhereSet(t *testing.T) {
	p := &plan{cfg: driver.Config{Limits: driver.Limits{OpenFiles: 128}}, uid: 1000, ownUID: true, tier: driver.TierContainer}
	openFiles := func(b bootReport) driver.Control {
		for _, c := range (&Driver{}).isolation(p, &corev1.Pod{}, &agentBin{}, b).Controls {
			if c.Name == "open_files" {
				return c
			}
		}
		t.Fatal("no open_files control")
		return driver.Control{}
	}
	if c := openFiles(bootReport{nofile: 128}); !c.Enforced || c.Rlimit != driver.RlimitNOFILE || c.SetByAgent {
		t.Errorf("bootstrap set RLIMIT_NOFILE=128: control %+v, want enforced by RLIMIT_NOFILE set before the agent", c)
	}
	if c := openFiles(bootReport{}); c.Enforced || c.Rlimit != "" {
		t.Errorf("no python3, nothing set: control %+v, want not enforced", c)
	}
}

// TestFileSizeSetBeforeTheAgentWherePythonRuns: with python3 the bootstrap
// sets RLIMIT_FSIZE before the agent starts (every command inherits it, no
// window after a start); without, the agent sets it on each command.
func TestFileSizeSetBeforeTheAgentWherePythonRuns(t *testing.T) {
	p := &plan{cfg: driver.Config{Limits: driver.Limits{FileSizeBytes: 1000}}, uid: 1000, ownUID: true, tier: driver.TierContainer}
	fileSize := func(b bootReport) driver.Control {
		for _, c := range (&Driver{}).isolation(p, &corev1.Pod{}, &agentBin{}, b).Controls {
			if c.Name == "file_size" {
				return c
			}
		}
		t.Fatal("no file_size control")
		return driver.Control{}
	}
	if c := fileSize(bootReport{fsize: 1000}); !c.Enforced || c.Rlimit != driver.RlimitFSIZE || c.SetByAgent {
		t.Errorf("bootstrap set RLIMIT_FSIZE=1000: control %+v, want it set before the agent", c)
	}
	if c := fileSize(bootReport{}); !c.Enforced || c.Rlimit != driver.RlimitFSIZE || !c.SetByAgent {
		t.Errorf("no python3: control %+v, want it set by the agent on each command", c)
	}
}
