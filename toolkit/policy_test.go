package toolkit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxkit/sandboxkit/toolkit"
)

// recorder is a set of tools with the built-ins' names and argument shapes that record what
// reached them, so a test sees whether the policy let a call through.
type recorder struct {
	mu  sync.Mutex
	ran []string
}

type shellIn struct {
	Command   string `json:"command,omitempty"`
	SessionID string `json:"session_id,omitempty"`
	Input     string `json:"input,omitempty"`
}

type codeIn struct {
	Code string `json:"code"`
}

type pathIn struct {
	Path    string `json:"path"`
	Content string `json:"content,omitempty"`
}

func (r *recorder) kit() *toolkit.Toolkit {
	record := func(s string) { r.mu.Lock(); r.ran = append(r.ran, s); r.mu.Unlock() }
	shell := func(name string) *toolkit.Tool {
		return toolkit.New(name, "", func(_ context.Context, in shellIn) (string, error) {
			record(name + ": " + in.Command + in.Input)
			return "ran", nil
		})
	}
	file := func(name string) *toolkit.Tool {
		return toolkit.New(name, "", func(_ context.Context, in pathIn) (string, error) {
			record(name + ": " + in.Path)
			return "ran", nil
		})
	}
	return toolkit.Of(shell("run_command"), shell("start_background"), shell("bash"),
		toolkit.New("run_python", "", func(_ context.Context, in codeIn) (string, error) {
			record("run_python: " + in.Code)
			return "ran", nil
		}),
		file("write_file"), file("delete_file"), file("read_file"))
}

func (r *recorder) ranCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ran)
}

// rules parses "deny rm -rf" style lines into command rules.
func rules(t testing.TB, lines ...string) []toolkit.Rule {
	var out []toolkit.Rule
	for _, l := range lines {
		d, pat, _ := strings.Cut(l, " ")
		var dec toolkit.Decision
		switch d {
		case "deny":
			dec = toolkit.Deny
		case "ask":
			dec = toolkit.Ask
		case "allow":
			dec = toolkit.Allow
		default:
			t.Fatalf("bad rule line %q", l)
		}
		out = append(out, toolkit.Rule{Decision: dec, Command: pat})
	}
	return out
}

// outcome runs one call through a toolkit with the policy and says what happened: "allow"
// (the tool ran), "deny" or "ask" (the approver was asked; it refuses), and the result text.
func outcome(t *testing.T, p *toolkit.Policy, asked *[]toolkit.ApprovalRequest, tool, args string) (string, string) {
	t.Helper()
	var r recorder
	kit := r.kit()
	kit.SetPolicy(p)
	n := len(*asked)
	res, err := kit.Call(context.Background(), tool, json.RawMessage(args))
	if err != nil {
		t.Fatalf("Call: %v", err)
	}
	switch {
	case r.ranCount() == 1 && !res.IsError:
		return "allow", res.Text
	case r.ranCount() == 0 && len(*asked) > n:
		return "ask", res.Text
	case r.ranCount() == 0 && res.IsError:
		return "deny", res.Text
	}
	t.Fatalf("ran %d times, IsError %v: %s", r.ranCount(), res.IsError, res.Text)
	return "", ""
}

var (
	rm   = []string{"deny rm"}
	rmrf = []string{"deny rm -rf"}
	git  = []string{"deny git push", "allow git status"}
)

// commandTable is the table of commands, rules and the decision with what decides it; the
// fuzz test starts from its commands.
var commandTable = []struct {
	name    string
	command string
	rules   []string
	opts    []toolkit.PolicyOption
	want    string // allow, deny or ask
	by      string // the rule (as Rule.String) or "default" that decided; "" for allow without rule
}{
	// The first-token denylist's bypasses, each caught.
	{"plain", "rm x", rm, nil, "deny", `deny command "rm"`},
	{"absolute path", "/bin/rm -f x", rm, nil, "deny", `deny command "rm"`},
	{"relative path", "./rm x", rm, nil, "deny", `deny command "rm"`},
	{"dotdot path", "../../usr/bin/rm x", rm, nil, "deny", `deny command "rm"`},
	{"env", "env rm x", rm, nil, "deny", `deny command "rm"`},
	{"env with options and assignments", "env -i -u HOME A=1 rm x", rm, nil, "deny", `deny command "rm"`},
	{"env split string", "env -S 'rm x'", rm, nil, "deny", `deny command "rm"`},
	{"assignment before", "x=1 rm x", rm, nil, "deny", `deny command "rm"`},
	{"sudo with user", "sudo -u root rm x", rm, nil, "deny", `deny command "rm"`},
	{"nice timeout nohup stacked", "nice -n 5 timeout -s KILL 10 nohup rm x", rm, nil, "deny", `deny command "rm"`},
	{"bash -c", `bash -c "rm x"`, rm, nil, "deny", `deny command "rm"`},
	{"sh -c inside bash -c", `bash -c 'sh -c "rm x"'`, rm, nil, "deny", `deny command "rm"`},
	{"combined -lc", `bash -lc 'rm x'`, rm, nil, "deny", `deny command "rm"`},
	{"xargs", "echo x | xargs rm", rm, nil, "deny", `deny command "rm"`},
	{"xargs with options", "printf 'x\\0' | xargs -0 -n 1 rm", rm, nil, "deny", `deny command "rm"`},
	{"find -exec", `find . -name '*.tmp' -exec rm {} \;`, rm, nil, "deny", `deny command "rm"`},
	{"find -execdir +", "find . -execdir rm {} +", rm, nil, "deny", `deny command "rm"`},
	{"command builtin", "command rm x", rm, nil, "deny", `deny command "rm"`},
	{"exec", "exec rm x", rm, nil, "deny", `deny command "rm"`},
	{"watch", "watch -n 1 rm x", rm, nil, "deny", `deny command "rm"`},
	{"trap", "trap 'rm x' EXIT", rm, nil, "deny", `deny command "rm"`},
	{"literal eval", "eval 'rm x'", rm, nil, "deny", `deny command "rm"`},
	{"brace expansion", "{rm,x}", rm, nil, "deny", `deny command "rm"`},
	// Quoting tricks.
	{"backslash", `\rm x`, rm, nil, "deny", `deny command "rm"`},
	{"split single quotes", `'r'm x`, rm, nil, "deny", `deny command "rm"`},
	{"empty double quotes", `r""m x`, rm, nil, "deny", `deny command "rm"`},
	{"ANSI-C hex escape", `$'\x72m' x`, rm, nil, "deny", `deny command "rm"`},
	{"escaped middle letter", `r\m x`, rm, nil, "deny", `deny command "rm"`},
	{"double quoted", `"rm" x`, rm, nil, "deny", `deny command "rm"`},
	// Everywhere in the text.
	{"list", "ls; rm x", rm, nil, "deny", `deny command "rm"`},
	{"and-or", "ls || true && rm x", rm, nil, "deny", `deny command "rm"`},
	{"subshell", "(cd /tmp && rm x)", rm, nil, "deny", `deny command "rm"`},
	{"command substitution", "echo $(rm x)", rm, nil, "deny", `deny command "rm"`},
	{"backticks in double quotes", "echo \"`rm x`\"", rm, nil, "deny", `deny command "rm"`},
	{"process substitution", "cat <(rm x)", rm, nil, "deny", `deny command "rm"`},
	{"parameter default", "echo ${x:-$(rm y)}", rm, nil, "deny", `deny command "rm"`},
	{"here-document", "cat <<EOF\n$(rm x)\nEOF", rm, nil, "deny", `deny command "rm"`},
	{"if and for", "if true; then for f in a; do rm $f; done; fi", rm, nil, "deny", `deny command "rm"`},
	{"function body", "f() { rm x; }; f", rm, nil, "deny", `deny command "rm"`},
	{"alias in the same text", "alias del=rm; del x", rm, nil, "deny", `deny command "rm"`},
	{"background", "rm x &", rm, nil, "deny", `deny command "rm"`},
	{"line continuation inside the name", "r\\\nm x", rm, nil, "deny", `deny command "rm"`},
	{"doubled slash", "/bin//rm x", rm, nil, "deny", `deny command "rm"`},
	{"escaped slashes", `\/bin\/rm x`, rm, nil, "deny", `deny command "rm"`},
	{"coproc", "coproc rm x", rm, nil, "deny", `deny command "rm"`},
	{"test clause substitution", "[[ -n $(rm x) ]]", rm, nil, "deny", `deny command "rm"`},
	{"export with substitution", "export x=$(rm y)", rm, nil, "deny", `deny command "rm"`},
	{"redirection target", "echo hi > $(rm x)", rm, nil, "deny", `deny command "rm"`},
	{"builtin eval", "builtin eval 'rm x'", rm, nil, "deny", `deny command "rm"`},
	{"xargs into sh -c", "ls | xargs -I{} sh -c 'rm {}'", rm, nil, "deny", `deny command "rm"`},
	{"alias with a trailing space", "alias s='sudo '; s rm x", rm, nil, "deny", `deny command "rm"`},
	{"locale-translated string", `$"rm" x`, rm, nil, "deny", "default"},
	{"su with the command after the user", "su root -c 'rm x'", rm, nil, "deny", "default"},
	// What cannot be known falls to the default, never to allow.
	{"printf substitution", "$(printf rm) x", rm, nil, "deny", "default"},
	{"backtick substitution", "`printf rm` x", rm, nil, "deny", "default"},
	{"variable as program", `c=rm; $c x`, rm, nil, "deny", "default"},
	{"glob as program", "/bin/r? x", rm, nil, "deny", "default"},
	{"eval of a variable", `eval "$c"`, rm, nil, "deny", "default"},
	{"source", "source ./script.sh", rm, nil, "deny", "default"},
	{"dot", ". ./script.sh", rm, nil, "deny", "default"},
	{"pipe into a shell", "echo 'rm x' | sh", rm, nil, "deny", "default"},
	{"script file", "bash ./cleanup.sh", rm, nil, "deny", "default"},
	{"does not parse", "rm 'x", rm, nil, "deny", "default"},
	{"default ask", "$(printf rm) x", rm, []toolkit.PolicyOption{toolkit.Undecidable(toolkit.Ask)}, "ask", "default"},
	// Not rm at all.
	{"echo rm runs", "echo rm", rm, nil, "allow", ""},
	{"rm as an argument", "grep -r rm .", rm, nil, "allow", ""},
	{"command -v only looks up", "command -v rm", rm, nil, "allow", ""},
	{"rmdir is another program", "rmdir d", rm, nil, "allow", ""},
	// Options in any spelling.
	{"-r -f", "rm -r -f x", rmrf, nil, "deny", `deny command "rm -rf"`},
	{"-fr", "rm -fr x", rmrf, nil, "deny", `deny command "rm -rf"`},
	{"-Rf", "rm -Rf x", rmrf, nil, "deny", `deny command "rm -rf"`},
	{"long options", "rm --recursive --force x", rmrf, nil, "deny", `deny command "rm -rf"`},
	{"abbreviated long option", "rm --rec -f x", rmrf, nil, "deny", `deny command "rm -rf"`},
	{"options after operands", "rm x -f -r", rmrf, nil, "deny", `deny command "rm -rf"`},
	{"only -r", "rm -r x", rmrf, nil, "allow", ""},
	{"options from a variable", "rm $opts x", rmrf, nil, "deny", "default"},
	{"xargs input may add options", "echo x | xargs rm -r", rmrf, nil, "deny", "default"},
	// Arguments as globs, prefix on word boundaries.
	{"git push", "git push origin main", git, nil, "deny", `deny command "git push"`},
	{"git global option before", "git -C repo push", git, nil, "deny", `deny command "git push"`},
	{"git push --force", "git push --force", git, nil, "deny", `deny command "git push"`},
	{"git status allowed", "git status", git, nil, "allow", `allow command "git status"`},
	{"git pull", "git pull", git, nil, "allow", ""},
	{"git subcommand in a variable", "git $sub origin", git, nil, "deny", "default"},
	{"pip install asks", "pip install numpy", []string{"ask pip install *"}, nil, "ask", `ask command "pip install *"`},
	{"pip with an option first", "pip -q install numpy", []string{"ask pip install *"}, nil, "ask", `ask command "pip install *"`},
	{"pip list", "pip list", []string{"ask pip install *"}, nil, "allow", ""},
	{"pip subcommand in a variable asks", "pip $sub numpy", []string{"ask pip install *"}, nil, "ask", "default"},
	{"python -m pip", "python3 -m pip install numpy", []string{"ask pip install *"}, nil, "ask", `ask command "pip install *"`},
	{"python -c is Python", "python3 -c 'print(1)'", []string{"ask pip install *"}, nil, "allow", ""},
	{"python -um pip", "python3.12 -W ignore -um pip install numpy", []string{"ask pip install *"}, nil, "ask", `ask command "pip install *"`},
	{"deny beats ask", "sudo pip install x", []string{"ask pip install *", "deny sudo"}, nil, "deny", `deny command "sudo"`},
	// Allow-list mode.
	{"allowed by rule", "ls -la", []string{"allow ls", "allow cat"}, []toolkit.PolicyOption{toolkit.UnmatchedCommands(toolkit.Deny)}, "allow", `allow command "ls"`},
	{"not on the list", "ls | wc -l", []string{"allow ls", "allow cat"}, []toolkit.PolicyOption{toolkit.UnmatchedCommands(toolkit.Deny)}, "deny", "no rule allows wc -l"},
}

func TestPolicyCommandTable(t *testing.T) {
	tests := commandTable
	if len(tests) < 40 {
		t.Fatalf("the table has %d rows; the issue asks for at least 40", len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var asked []toolkit.ApprovalRequest
			approver := toolkit.Approver(func(_ context.Context, req toolkit.ApprovalRequest) (toolkit.Approval, error) {
				asked = append(asked, req)
				return toolkit.Approval{Allow: false, Message: "not now"}, nil
			})
			p, err := toolkit.NewPolicy(rules(t, tt.rules...), append(tt.opts, approver)...)
			if err != nil {
				t.Fatal(err)
			}
			args, _ := json.Marshal(map[string]string{"command": tt.command})
			got, text := outcome(t, p, &asked, "run_command", string(args))
			if got != tt.want {
				t.Fatalf("%q with %v: %s, want %s\n%s", tt.command, tt.rules, got, tt.want, text)
			}
			switch {
			case got == "deny" && tt.by == "default":
				if !strings.Contains(text, "default") || !strings.Contains(text, "not a rule") {
					t.Errorf("the refusal does not say the default decided:\n%s", text)
				}
			case got == "deny":
				if !strings.Contains(text, tt.by) {
					t.Errorf("the refusal does not name %s:\n%s", tt.by, text)
				}
			case got == "ask":
				reasons := strings.Join(asked[0].Reasons, "\n")
				if want := tt.by; want == "default" && !strings.Contains(reasons, "default") || want != "default" && !strings.Contains(reasons, want) {
					t.Errorf("the approver was asked for %q, want a reason naming %s", reasons, tt.by)
				}
				if len(asked[0].Commands) == 0 || asked[0].Tool != "run_command" || string(asked[0].Arguments) != string(args) {
					t.Errorf("the approver was not shown the call in full: %+v", asked[0])
				}
			}
		})
	}
}

func TestPolicyFollowsABashSessionsAliases(t *testing.T) {
	var r recorder
	kit := r.kit()
	kit.SetPolicy(toolkit.DenyCommands("rm -rf"))
	call := func(args string) toolkit.Result {
		t.Helper()
		res, err := kit.Call(context.Background(), "bash", json.RawMessage(args))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// rm -r alone is allowed, so the definition runs; a later call of the alias with -f is
	// rm -r -f, which the rule denies, although the text of that call never says rm.
	if res := call(`{"command":"alias del='rm -r'"}`); res.IsError {
		t.Fatalf("defining the alias was refused: %s", res.Text)
	}
	res := call(`{"command":"del -f build"}`)
	if !res.IsError || !strings.Contains(res.Text, `deny command "rm -rf"`) || !strings.Contains(res.Text, "alias del") {
		t.Errorf("calling the alias of a denied command: %s", res.Text)
	}
	// Text typed into the session is read by bash once the running program exits.
	if res := call(`{"input":"del -f build\n"}`); !res.IsError {
		t.Errorf("input that runs the alias was let through: %s", res.Text)
	}
	// Another session never defined it: there del is just a program name.
	if res := call(`{"command":"del -f build","session_id":"other"}`); res.IsError {
		t.Errorf("the alias leaked into another session: %s", res.Text)
	}
	// A function defined in one call and used in the next is followed too.
	kit.SetPolicy(toolkit.DenyCommands("git push"))
	if res := call(`{"command":"ship() { git push origin main; }"}`); !res.IsError {
		t.Errorf("a function whose body pushes was defined: %s", res.Text)
	}
	if res := call(`{"command":"sync() { git fetch; }"}`); res.IsError {
		t.Fatalf("a harmless function was refused: %s", res.Text)
	}
	if res := call(`{"command":"sync && ls"}`); res.IsError {
		t.Errorf("calling the harmless function was refused: %s", res.Text)
	}
}

func TestPolicyOnPythonCellsShellLines(t *testing.T) {
	p := toolkit.DenyCommands("rm", "pip install")
	for _, code := range []string{
		"!rm -rf data",
		"import os\nfiles = !rm x\nprint(files)",
		"%%bash\necho start\nrm -r data",
		"%%time\n!rm x",
		"%pip install requests",
	} {
		var asked []toolkit.ApprovalRequest
		args, _ := json.Marshal(map[string]string{"code": code})
		if got, text := outcome(t, p, &asked, "run_python", string(args)); got != "deny" {
			t.Errorf("cell %q: %s, want deny\n%s", code, got, text)
		}
	}
	var asked []toolkit.ApprovalRequest
	if got, text := outcome(t, p, &asked, "run_python", `{"code":"print('rm x')\n!ls"}`); got != "allow" {
		t.Errorf("a harmless cell: %s\n%s", got, text)
	}
}

func TestPolicyToolAndPathRules(t *testing.T) {
	var asked []toolkit.ApprovalRequest
	p, err := toolkit.NewPolicy([]toolkit.Rule{
		{Decision: toolkit.Deny, Tool: "write_file", Paths: []string{".git"}, Message: "commit with git instead of editing .git"},
		{Decision: toolkit.Ask, Tool: "delete_file", ExceptPaths: []string{"tmp"}},
	}, toolkit.Approver(func(_ context.Context, req toolkit.ApprovalRequest) (toolkit.Approval, error) {
		asked = append(asked, req)
		return toolkit.Approval{}, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ tool, path, want string }{
		{"write_file", ".git/config", "deny"},
		{"write_file", "sub/.git/hooks/pre-commit", "deny"},
		{"write_file", "/workspace/.git/HEAD", "deny"},
		{"write_file", "src/../.git/config", "deny"},
		{"write_file", ".gitignore", "allow"},
		{"write_file", "src/main.go", "allow"},
		{"delete_file", "tmp/scratch.txt", "allow"},
		{"delete_file", "/tmp/x", "allow"},
		{"delete_file", "src/main.go", "ask"},
		{"delete_file", "tmp/../src/main.go", "ask"},
		{"read_file", ".git/config", "allow"},
	}
	for _, tt := range tests {
		args, _ := json.Marshal(map[string]string{"path": tt.path})
		got, text := outcome(t, p, &asked, tt.tool, string(args))
		if got != tt.want {
			t.Errorf("%s %s: %s, want %s\n%s", tt.tool, tt.path, got, tt.want, text)
		}
		if got == "deny" && !strings.Contains(text, "commit with git instead") {
			t.Errorf("%s %s: the refusal lacks the rule's message:\n%s", tt.tool, tt.path, text)
		}
	}
}

func TestPolicyApprovalsOnceAlwaysAndNobodyToAsk(t *testing.T) {
	var answers []toolkit.Approval
	var asked []toolkit.ApprovalRequest
	rules := rules(t, "ask pip install *")
	p, err := toolkit.NewPolicy(rules, toolkit.Approver(func(_ context.Context, req toolkit.ApprovalRequest) (toolkit.Approval, error) {
		asked = append(asked, req)
		a := answers[0]
		answers = answers[1:]
		return a, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	var r recorder
	kit := r.kit()
	kit.SetPolicy(p)
	call := func(cmd string) toolkit.Result {
		args, _ := json.Marshal(map[string]string{"command": cmd})
		res, err := kit.Call(context.Background(), "run_command", args)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	answers = []toolkit.Approval{{Allow: true}, {Allow: false, Message: "use the vendored copy"}, {Allow: true, Always: true}}
	if res := call("pip install numpy"); res.IsError || r.ranCount() != 1 {
		t.Fatalf("allowed once, did not run: %s", res.Text)
	}
	if res := call("pip install numpy"); !res.IsError || !strings.Contains(res.Text, "use the vendored copy") {
		t.Errorf("denied by the person: %s", res.Text)
	}
	call("pip install pandas")
	if res := call("pip install scipy"); res.IsError || len(asked) != 3 {
		t.Errorf("after always, asked %d times (want 3): %s", len(asked), res.Text)
	}
	if got := asked[0].Commands; len(got) != 1 || got[0] != "pip install numpy" {
		t.Errorf("the approver was shown commands %q", got)
	}

	// Without an approver an ask is a denial that says why.
	var r2 recorder
	kit2 := r2.kit()
	p2, _ := toolkit.NewPolicy(rules)
	kit2.SetPolicy(p2)
	res, _ := kit2.Call(context.Background(), "run_command", json.RawMessage(`{"command":"pip install x"}`))
	if !res.IsError || !strings.Contains(res.Text, "no one to ask") || r2.ranCount() != 0 {
		t.Errorf("ask without an approver: %s", res.Text)
	}
}

func TestPolicyAuditsEveryDecision(t *testing.T) {
	var buf bytes.Buffer
	p, err := toolkit.NewPolicy(rules(t, "deny rm"), toolkit.PolicyAudit(slog.NewJSONHandler(&buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	var r recorder
	kit := r.kit()
	kit.SetPolicy(p)
	kit.Call(context.Background(), "run_command", json.RawMessage(`{"command":"ls"}`))
	kit.Call(context.Background(), "run_command", json.RawMessage(`{"command":"/bin/rm x"}`))
	kit.Call(context.Background(), "run_command", json.RawMessage(`{"command":"$(printf rm) x"}`))
	var events []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var e map[string]any
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		events = append(events, e)
	}
	if len(events) != 3 {
		t.Fatalf("%d audit events, want 3:\n%s", len(events), buf.String())
	}
	want := []struct{ decision, by, rule string }{{"allow", "no rule", ""}, {"deny", "rule", `deny command "rm"`}, {"deny", "default", "default"}}
	for i, w := range want {
		e := events[i]
		if e["msg"] != "policy decision" || e["tool"] != "run_command" || e["decision"] != w.decision || e["decided_by"] != w.by || (w.rule != "" && e["rule"] != w.rule) {
			t.Errorf("event %d = %v, want %+v", i, e, w)
		}
	}
}

func TestParsePolicy(t *testing.T) {
	yamlText := `
undecidable: ask
rules:
  - {decision: deny, command: rm -rf, message: delete single files with delete_file}
  - {decision: ask, tool: delete_file, except_paths: [tmp]}
`
	jsonText := `{"undecidable":"ask","rules":[{"decision":"deny","command":"rm -rf","message":"delete single files with delete_file"},{"decision":"ask","tool":"delete_file","except_paths":["tmp"]}]}`
	for _, text := range []string{yamlText, jsonText} {
		p, err := toolkit.ParsePolicy([]byte(text))
		if err != nil {
			t.Fatal(err)
		}
		var asked []toolkit.ApprovalRequest
		got, msg := outcome(t, p, &asked, "run_command", `{"command":"rm -fr x"}`)
		if got != "deny" || !strings.Contains(msg, "delete single files") {
			t.Errorf("rm -fr: %s %s", got, msg)
		}
		if got, msg := outcome(t, p, &asked, "run_command", `{"command":"eval \"$x\""}`); got != "deny" || !strings.Contains(msg, "no one to ask") {
			t.Errorf("undecidable: ask from the file: %s %s", got, msg)
		}
	}
	for _, bad := range []string{
		"rules: [{decision: deny, comand: rm}]",   // a typo must not drop a rule
		"rules: [{decision: maybe, command: rm}]", // unknown decision
		"undecidable: allow",                      // never silently allow
		"rules: [{decision: deny}]",               // neither command nor tool
		"rules: [{decision: deny, command: 'rm --force=yes'}]",
	} {
		if _, err := toolkit.ParsePolicy([]byte(bad)); err == nil {
			t.Errorf("ParsePolicy(%q) accepted it", bad)
		}
	}
}

// TestPolicyCoversEveryToolThatRunsShellText: the same command is refused whichever built-in
// runs it.
func TestPolicyCoversEveryToolThatRunsShellText(t *testing.T) {
	p := toolkit.DenyCommands("rm")
	for _, tt := range []struct{ tool, args string }{
		{"run_command", `{"command":"/bin/rm x"}`},
		{"start_background", `{"command":"sleep 1; /bin/rm x"}`},
		{"bash", `{"command":"/bin/rm x"}`},
		{"bash", `{"input":"/bin/rm x\n"}`},
		{"run_python", `{"code":"!/bin/rm x"}`},
	} {
		var asked []toolkit.ApprovalRequest
		if got, text := outcome(t, p, &asked, tt.tool, tt.args); got != "deny" || !strings.Contains(text, `deny command "rm"`) {
			t.Errorf("%s %s: %s\n%s", tt.tool, tt.args, got, text)
		}
	}
}

// TestPolicyLetsKeysThrough: in allow-list mode, keys sent to a bash session (C-c to
// interrupt) are keys, not commands to decide; text typed there is decided.
func TestPolicyLetsKeysThrough(t *testing.T) {
	p, err := toolkit.NewPolicy(rules(t, "allow ls"), toolkit.UnmatchedCommands(toolkit.Deny))
	if err != nil {
		t.Fatal(err)
	}
	var asked []toolkit.ApprovalRequest
	for args, want := range map[string]string{
		`{"input":"C-c"}`:        "allow",
		`{"input":"Escape C-d"}`: "allow",
		`{"input":"ls -l"}`:      "allow",
		`{"input":"cat x"}`:      "deny",
	} {
		if got, text := outcome(t, p, &asked, "bash", args); got != want {
			t.Errorf("bash %s: %s, want %s\n%s", args, got, want, text)
		}
	}
}

// TestPolicyReadsArgumentsAsTheToolDoes: JSON the policy and the tool could read differently
// (a duplicated key, a key escaped or in another case) never runs a command the policy did
// not see.
func TestPolicyReadsArgumentsAsTheToolDoes(t *testing.T) {
	for _, args := range []string{
		`{"command":"echo hi","command":"/bin/rm x"}`,
		`{"command":"echo hi","comm\u0061nd":"/bin/rm x"}`,
		`{"command":"echo hi","Command":"/bin/rm x"}`,
		`{"COMMAND":"/bin/rm x"}`,
	} {
		var r recorder
		kit := r.kit()
		kit.SetPolicy(toolkit.DenyCommands("rm"))
		if _, err := kit.Call(context.Background(), "run_command", json.RawMessage(args)); err != nil {
			t.Fatal(err)
		}
		for _, ran := range r.ran {
			if strings.Contains(ran, "rm") {
				t.Errorf("%s: the tool ran %q", args, ran)
			}
		}
	}
}
