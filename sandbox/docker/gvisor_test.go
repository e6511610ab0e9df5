package docker

import (
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
)

// The probes of the creation-time measurement are right: on runc, where
// the suites show every control holds, every probe passes.
func TestRuntimeProbesPassOnRunc(t *testing.T) {
	d := newTestDriver(t)
	ctx := testCtx(t)
	f, err := d.facts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.resolve(driver.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if f.seccomp {
		if p.seccomp, err = seccompProfile(); err != nil {
			t.Fatal(err)
		}
	}
	imageID, err := d.ensureImage(ctx, p.image, p.pull, nil)
	if err != nil {
		t.Fatal(err)
	}
	ag, err := findAgent(ctx, "", f.arch)
	if err != nil {
		t.Fatal(err)
	}
	vol, err := d.agentVolume(ctx, p.image, ag)
	if err != nil {
		t.Fatal(err)
	}
	failed, err := d.measure(ctx, p, f, imageID, ag, vol)
	if err != nil || failed != "" {
		t.Fatalf("measuring runc: failed %q, err %v; want every probe to pass", failed, err)
	}
}

// runscDriver is a driver on gVisor's runsc, skipping (failing when
// SANDBOXKIT_REQUIRE names gvisor) where the engine has no such runtime.
func runscDriver(t *testing.T) *Driver {
	t.Helper()
	d := newTestDriver(t, WithRuntime("runsc"))
	f, err := d.facts(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if !f.runtimes["runsc"] {
		sandboxtest.Unavailable(t, "gvisor", "the engine has no runsc runtime (.ci/docker/start-engine.sh registers Debian's)")
	}
	return d
}

// A sandbox on runsc is made only after the runtime was measured: it
// either reports the gvisor tier with the measurement in Info, or is
// refused with ISOLATION_UNAVAILABLE naming the control whose probe failed.
func TestRunscIsMeasuredAtCreation(t *testing.T) {
	d := runscDriver(t)
	inst, err := d.Start(testCtx(t), driver.Config{ID: "gvisor-" + randID(), Owner: "sandboxkit-docker-test"})
	if err != nil {
		if codeOf(err) != driver.CodeIsolationUnavailable || !strings.Contains(err.Error(), "failed the creation-time check, probe ") {
			t.Fatalf("Start on runsc = %v; want a sandbox, or %s naming the failed probe", err, driver.CodeIsolationUnavailable)
		}
		t.Logf("runsc refused, as measured: %v", err)
		// The verdict is kept: a second Start does not measure again.
		if _, err2 := d.Start(testCtx(t), driver.Config{ID: "gvisor-" + randID()}); err2 == nil || err2.Error() != err.Error() {
			t.Errorf("second Start = %v, want the same refusal", err2)
		}
		return
	}
	c := inst.(*Container)
	defer c.Close(testCtx(t))
	iso := c.Isolation()
	if iso.Tier != driver.TierGVisor || !strings.Contains(iso.Extra["runtime_check"], "held") {
		t.Errorf("tier %s, runtime_check %q; want gvisor and the measurement", iso.Tier, iso.Extra["runtime_check"])
	}
}
