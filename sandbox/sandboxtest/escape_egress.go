package sandboxtest

import (
	"fmt"
	"strings"
	"testing"
)

// egressProbe attacks a sandbox's egress proxy (sandbox.WithEgress), where
// there is one: through the proxy it asks for the host's listener by IP
// literal, by "localhost" and by names no policy in these tests allows,
// and for the cloud metadata address, with plain HTTP and with CONNECT.
// The proxy must refuse each (HostUnchanged fails on any connection to the
// listener); where the sandbox has no proxy the probe only says so.
func egressProbe(h *escapeHost) escapeProbe {
	return escapeProbe{name: "EgressProxy", needPython: true, want: []string{"egress-done"},
		script: fmt.Sprintf(`[ -n "$HTTP_PROXY" ] || { echo "no egress proxy"; echo egress-done; exit 0; }
cat > "${TMPDIR:-/tmp}/egress.py" <<'PYEOF'
import socket, sys
port = int(sys.argv[1])
targets = ["127.0.0.1:%%d" %% port, "localhost:%%d" %% port, "[::1]:%%d" %% port, "0.0.0.0:%%d" %% port,
           "2130706433:%%d" %% port, "169.254.169.254:80", "metadata.google.internal:80", "pkgs.test.:%%d" %% port]
for t in targets:
    for req in ("GET http://%%s/ HTTP/1.1\r\nHost: %%s\r\n\r\n" %% (t, t), "CONNECT %%s HTTP/1.1\r\nHost: %%s\r\n\r\n" %% (t, t)):
        try:
            s = socket.create_connection(("127.0.0.1", 3128), timeout=15)
            s.sendall(req.encode())
            status = s.recv(4096).split(b"\r\n")[0].decode()
            print(req.split()[0], t, "->", status)
            if " 200 " in status + " ":
                print("ESCAPED:egress-" + t)
        except Exception as e:
            print(req.split()[0], t, "error", e)
PYEOF
$PY "${TMPDIR:-/tmp}/egress.py" %d; echo egress-done`, h.tcp),
		post: func(t *testing.T, b *box, out string) {
			if b.sb.Info().Egress == nil {
				return
			}
			// 8 targets, each asked for with GET and with CONNECT.
			if n := strings.Count(out, "-> HTTP/1.1 403 "); n != 16 {
				t.Errorf("the egress proxy answered %d of 16 requests for forbidden targets with 403:\n%s", n, out)
			}
		}}
}
