package main

import (
	"strings"
	"testing"
)

// TestAllowDomain: --allow-domain gives the sandbox the proxy (and only
// the names listed); a malformed name is a usage error.
func TestAllowDomain(t *testing.T) {
	path := writeTranscript(t,
		`{"kind":"start","model":"m","task":"proxy?"}`,
		`{"kind":"turn","step":1,"message":{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"run_command","arguments":"{\"command\":\"echo proxy=$HTTPS_PROXY\"}"}}]}}`,
		`{"kind":"turn","step":2,"message":{"role":"assistant","content":"Done."}}`,
	)
	code, out, errOut := runMain(t, "--replay", path, "--workspace", workspace(t), "--allow-domain", "pypi.org")
	if code == exitFailed && strings.Contains(errOut, "SBX_ISOLATION_UNAVAILABLE") {
		t.Skip("no namespace tier here: egress needs it (or Docker)")
	}
	if !strings.Contains(out, "proxy=http://127.0.0.1:3128") {
		t.Errorf("exit %d: the command did not find the proxy; stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	code, _, errOut = runMain(t, "--replay", path, "--allow-domain", "not a name")
	if code != exitUsage || !strings.Contains(errOut, "not a host name") {
		t.Errorf("--allow-domain 'not a name': exit %d, stderr %q; want a usage error", code, errOut)
	}
}
