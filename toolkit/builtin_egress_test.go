package toolkit_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/sandbox/sandboxtest"
	"github.com/sandboxkit/sandboxkit/toolkit"
)

// TestSandboxInfoNamesAllowedDomains: with an egress policy, sandbox_info
// tells the model which domains it may reach and what happens otherwise,
// instead of "network: off".
func TestSandboxInfoNamesAllowedDomains(t *testing.T) {
	sb, err := sandbox.New(context.Background(), sandbox.WithEgress(sandbox.EgressPolicy{Allow: sandbox.AllowDomains("pypi.org", "*.pythonhosted.org")}))
	if err != nil {
		sandboxtest.Unavailable(t, "namespace", "egress needs the namespace tier: "+err.Error())
	}
	defer sb.Close()
	res, err := toolkit.ForSandbox(sb).Call(context.Background(), "sandbox_info", []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"network: only HTTP/HTTPS to pypi.org, *.pythonhosted.org", "refused with HTTP 403", "ask the user to allow its domain"} {
		if !strings.Contains(res.Text, want) {
			t.Errorf("sandbox_info lacks %q:\n%s", want, res.Text)
		}
	}
}
