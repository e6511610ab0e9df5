package toolkit

import (
	"strings"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// egressState tells the model which hosts it may reach when the sandbox
// has an egress policy, and how: through the proxy the usual variables
// name, with a refusal it can recognise for everything else.
func egressState(e *sandbox.EgressInfo) string {
	return "only HTTP/HTTPS to " + strings.Join(e.Allow, ", ") +
		" (through the proxy in HTTP_PROXY/HTTPS_PROXY, which pip, curl, git, npm and Python use; every other host is refused with HTTP 403, and programs that ignore the proxy have no network; to reach another host, ask the user to allow its domain)"
}
