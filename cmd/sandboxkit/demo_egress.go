package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// demoNetwork shows, as a user would want to see it, that the sandbox
// cannot reach the network: it listens on the host's loopback and has
// the sandbox try to connect; with an egress policy it also asks the
// proxy for a name not on the list. No traffic leaves the machine. Where
// the tier does not block the network it says so instead of claiming a
// proof.
func demoNetwork(ctx context.Context, sb *sandbox.Sandbox) ([]string, error) {
	info := sb.Info()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer l.Close()
	var hits atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			hits.Add(1)
			c.Close()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	res, err := sb.Commands.Run(ctx, sandbox.Command{Shell: fmt.Sprintf(
		`if command -v bash >/dev/null; then bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d' 2>&1 && echo connected; else echo "no bash to try with"; fi`, port), Timeout: 20 * time.Second})
	if err != nil {
		return nil, err
	}
	var lines []string
	time.Sleep(50 * time.Millisecond) // let a connection that got through be counted
	out := strings.TrimSpace(res.Stdout)
	switch {
	case !networkEnforced(info) && !info.Network:
		lines = append(lines, fmt.Sprintf("the %s tier does not block the network, so this demo cannot prove anything about it (a listener on the host's loopback saw %d connections)", info.Isolation, hits.Load()))
	case hits.Load() == 0:
		lines = append(lines, fmt.Sprintf("a listener on the host's 127.0.0.1:%d was out of reach (%s); it saw 0 connections", port, lastLine(out)))
	default:
		lines = append(lines, fmt.Sprintf("the sandbox REACHED the host's 127.0.0.1:%d (%d connections)", port, hits.Load()))
	}
	if info.Egress == nil {
		return lines, nil
	}
	// A name nobody allows: the proxy refuses it before any DNS lookup.
	const name = "not-on-the-list.invalid"
	host, port2, _ := net.SplitHostPort(sandbox.EgressProxyAddr)
	res, err = sb.Commands.Run(ctx, sandbox.Command{Args: []string{"bash", "-c", fmt.Sprintf(`exec 3<>/dev/tcp/%s/%s && printf 'GET http://%s/ HTTP/1.1\r\nHost: %[3]s\r\nConnection: close\r\n\r\n' >&3 && head -n 1 <&3`,
		host, port2, name)}, Timeout: 20 * time.Second})
	if err != nil {
		return nil, err
	}
	lines = append(lines, fmt.Sprintf("egress allowed to %s only: the proxy answers http://%s/ with %q", strings.Join(info.Egress.Allow, ", "), name, strings.TrimSpace(res.Stdout+res.Stderr)))
	return lines, nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndex(s, "\n"); i >= 0 {
		s = s[i+1:]
	}
	if s == "" {
		return "refused"
	}
	return s
}
