package main

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// snapshot returns every file under dir with its content (directories as ""), to show that
// a refused call changed nothing.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			files[rel+"/"] = ""
			return nil
		}
		b, err := os.ReadFile(p)
		files[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatalf("reading the workspace: %v", err)
	}
	return files
}

// TestMCPDenyCommand drives `sandboxkit mcp --deny-command rm` with a real client: every way
// of reaching rm the issue lists is refused naming the rule or the default, the workspace
// is untouched, and a command that only mentions rm runs.
func TestMCPDenyCommand(t *testing.T) {
	c, srv := startStdio(t, "--deny-command", "rm")
	c.ok(t, "write_file", map[string]any{"path": "x", "content": "keep me\n"})
	c.ok(t, "write_file", map[string]any{"path": "sub/y", "content": "and me\n"})
	_, ws := createdSandbox(t, srv, 1)
	before := snapshot(t, ws)
	if before["x"] != "keep me\n" {
		t.Fatalf("the workspace %s does not hold the file written: %v", ws, before)
	}
	for _, tt := range []struct{ command, by string }{
		{"/bin/rm -f x", `rule deny command "rm" matched /bin/rm -f x`},
		{"env rm x", `rule deny command "rm" matched rm x (via env)`},
		{`bash -c "rm x"`, `rule deny command "rm" matched rm x (via bash -c)`},
		{"echo x | xargs rm", `rule deny command "rm" matched rm <input> (via xargs)`},
		{"$(printf rm) x", "not a rule but the policy's default for commands it cannot check decided (deny): $(printf rm) x"},
		{"find . -name y -exec rm {} +", `rule deny command "rm"`},
		{"cd sub && \\rm -r ../x y", `rule deny command "rm"`},
	} {
		res := c.call(t, "run_command", map[string]any{"command": tt.command})
		got := text(res)
		if !res.IsError || !strings.Contains(got, "run_command was not run") || !strings.Contains(got, tt.by) {
			t.Errorf("run_command %q: IsError %v, text:\n%s\nwant a refusal naming %s", tt.command, res.IsError, got, tt.by)
		}
	}
	res := c.call(t, "bash", map[string]any{"command": "alias del=rm"})
	if !res.IsError {
		t.Errorf("bash: defining an alias of rm was let through: %s", text(res))
	}
	res = c.call(t, "run_python", map[string]any{"code": "!rm x"})
	if !res.IsError {
		t.Errorf("run_python: a !rm line was let through: %s", text(res))
	}
	after := snapshot(t, ws)
	for name, content := range before {
		if after[name] != content {
			t.Errorf("refused calls changed the workspace: %s was %q, is %q", name, content, after[name])
		}
	}
	if got := c.ok(t, "run_command", map[string]any{"command": "echo rm"}); !strings.Contains(got, "rm") || !strings.Contains(got, "exit code: 0") {
		t.Errorf("echo rm: %s", got)
	}
	if n := len(srv.log.all(func(l string) bool {
		return strings.Contains(l, `msg="policy decision"`) && strings.Contains(l, "decision=deny")
	})); n != 9 {
		t.Errorf("%d audit events of denials in the server's log, want 9:\n%s", n, srv.log)
	}
}

// startStdioWith is startStdio with a client of the given options (an elicitation handler).
func startStdioWith(t *testing.T, opts *sdk.ClientOptions, protocol string, extra ...string) (*client, *mcpServer) {
	t.Helper()
	args := append([]string{"mcp"}, isolationFlags(t)...)
	cmd := exec.Command(binary, append(args, extra...)...)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = w
	srv := &mcpServer{cmd: cmd, log: newLineLog(r)}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "sandboxkit-test", Version: "1"}, opts).
		Connect(ctx, &sdk.CommandTransport{Command: cmd, TerminateDuration: time.Minute}, &sdk.ClientSessionOptions{ProtocolVersion: protocol})
	w.Close()
	if err != nil {
		r.Close()
		t.Fatalf("connecting to sandboxkit mcp: %v\nstderr:\n%s", err, srv.log)
	}
	t.Cleanup(func() { cs.Close(); r.Close() })
	return &client{cs, &progressLog{}}, srv
}

// TestMCPAskUsesElicitation: a call the policy asks about is put to the client's user with
// elicitation, showing the parsed command; their answer decides; a client without
// elicitation gets a refusal that says so. Clients on the protocol of 2026-07-28 get the
// question as an input-required result and call again with the answer; older ones get an
// elicitation request during the call.
func TestMCPAskUsesElicitation(t *testing.T) {
	for _, protocol := range []string{"2026-07-28", "2025-11-25", "2025-06-18"} {
		t.Run(protocol, func(t *testing.T) { checkAskUsesElicitation(t, protocol) })
	}
}

func checkAskUsesElicitation(t *testing.T, protocol string) {
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("rules:\n  - {decision: ask, command: touch}\n  - {decision: deny, tool: write_file, paths: [.git]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var questions []string
	answers := []string{"allow once", "deny", "allow always"}
	handler := func(_ context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
		questions = append(questions, req.Params.Message)
		a := answers[0]
		answers = answers[1:]
		return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"decision": a}}, nil
	}
	c, srv := startStdioWith(t, &sdk.ClientOptions{ElicitationHandler: handler}, protocol, "--policy", policy)
	c.ok(t, "run_command", map[string]any{"command": "sudo -n true 2>/dev/null; env touch one"})
	_, ws := createdSandbox(t, srv, 1)
	if _, err := os.Stat(filepath.Join(ws, "one")); err != nil {
		t.Errorf("allowed once, but the file was not made: %v", err)
	}
	if len(questions) != 1 || !strings.Contains(questions[0], "touch one (via env)") || !strings.Contains(questions[0], `ask command "touch"`) {
		t.Errorf("the question shown to the user: %q", questions)
	}
	res := c.call(t, "run_command", map[string]any{"command": "touch two"})
	if !res.IsError || !strings.Contains(text(res), "denied it") {
		t.Errorf("denied by the user: %s", text(res))
	}
	if _, err := os.Stat(filepath.Join(ws, "two")); err == nil {
		t.Errorf("the user denied it, but the file was made")
	}
	c.ok(t, "run_command", map[string]any{"command": "touch three"})
	c.ok(t, "run_command", map[string]any{"command": "touch four"}) // "always": not asked again
	if len(questions) != 3 {
		t.Errorf("asked %d times, want 3 (the fourth call was allowed always)", len(questions))
	}
	if res := c.call(t, "write_file", map[string]any{"path": ".git/config", "content": "x"}); !res.IsError || !strings.Contains(text(res), `deny tool "write_file" on paths under .git`) {
		t.Errorf("write_file into .git: %s", text(res))
	}

	plain, _ := startStdioWith(t, nil, protocol, "--policy", policy)
	res = plain.call(t, "run_command", map[string]any{"command": "touch five"})
	if !res.IsError || !strings.Contains(text(res), "does not support elicitation") {
		t.Errorf("a client without elicitation: %s", text(res))
	}
}

func TestMCPPolicyFlagErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("rules:\n  - {decision: deny, comand: rm}\n"), 0o644)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--policy", "/nonexistent/policy.yaml"}, "--policy"},
		{[]string{"--policy", bad}, "comand"},
		{[]string{"--deny-command", "rm --force=yes"}, "--deny-command"},
	} {
		r := runBinary(t, "", append([]string{"mcp"}, tt.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("sandboxkit mcp %v: exit %d, stderr %q; want 2 and %q", tt.args, r.code, r.stderr, tt.want)
		}
	}
}
