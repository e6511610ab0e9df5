package toolkit_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
	"github.com/sandboxkit/sandboxkit/toolkit"
)

func newSandbox(t testing.TB) *sandbox.Sandbox {
	t.Helper()
	sb, err := sandbox.New(context.Background(), sandbox.AllowWeaker(sandbox.TierProcess))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	return sb
}

func TestBuiltinToolsAsAModelCallsThem(t *testing.T) {
	ctx := context.Background()
	sb := newSandbox(t)
	kit := toolkit.ForSandbox(sb, toolkit.OutputLimit(64))
	steps := []struct {
		name      string
		tool      string
		args      string
		want      []string // substrings of the text the model reads
		wantError bool
	}{
		{"write a file", "write_file", `{"path":"src/a.txt","content":"one\ntwo\nthree\n"}`, []string{"wrote 14 bytes to src/a.txt"}, false},
		{"append with null optional", "write_file", `{"path":"src/a.txt","content":"four\n","append":true}`, []string{"appended 5 bytes"}, false},
		{"read numbered lines", "read_file", `{"path":"src/a.txt"}`, []string{"1\tone\n2\ttwo\n3\tthree\n4\tfour"}, false},
		{"read a range says how to continue", "read_file", `{"path":"src/a.txt","offset":2,"limit":1,"extra":1}`, []string{"unknown argument \"extra\""}, true},
		{"read a range", "read_file", `{"path":"src/a.txt","offset":2,"limit":1}`, []string{"2\ttwo\n[showing lines 2-2; the file continues: read_file with offset 3]"}, false},
		{"null for optional fields", "read_file", `{"path":"src/a.txt","offset":null,"limit":null}`, []string{"1\tone"}, false},
		{"wrong type", "read_file", `{"path":"src/a.txt","offset":"2"}`, []string{`argument "offset": expected integer, got string "2"`}, true},
		{"missing field", "write_file", `{"path":"x"}`, []string{`missing required argument "content"`}, true},
		{"path escape", "read_file", `{"path":"../../etc/passwd"}`, []string{"read_file failed: SBX_PATH_ESCAPE"}, true},
		{"missing file", "read_file", `{"path":"nope.txt"}`, []string{"SBX_NOT_FOUND"}, true},
		{"binary file is reported", "run_command", `{"command":"printf 'a\\000b' > bin.dat"}`, []string{"exit code: 0", "(no output)"}, false},
		{"binary read", "read_file", `{"path":"bin.dat"}`, []string{"bin.dat is a binary file (3 bytes); not shown"}, false},
		{"edit", "edit_file", `{"path":"src/a.txt","old_text":"two","new_text":"2"}`, []string{"replaced 1 occurrence in src/a.txt"}, false},
		{"edit no match", "edit_file", `{"path":"src/a.txt","old_text":"zzz","new_text":"2"}`, []string{"SBX_NO_MATCH"}, true},
		{"list", "list_files", `{"depth":2}`, []string{"src/\n", "src/a.txt  17", "bin.dat  3"}, false},
		{"search", "search_files", `{"pattern":"^T","ignore_case":true,"glob":"*.txt"}`, []string{"src/a.txt:3:three"}, false},
		{"search nothing", "search_files", `{"pattern":"qqq"}`, []string{"no matches"}, false},
		{"bad regex", "search_files", `{"pattern":"("}`, []string{"SBX_INVALID_ARGUMENT", "bad regular expression"}, true},
		{"find", "find_files", `{"pattern":"*.txt"}`, []string{"src/a.txt"}, false},
		{"chmod", "set_permissions", `{"path":"src/a.txt","mode":"755"}`, []string{"set mode 0755 on src/a.txt"}, false},
		{"chmod bad mode", "set_permissions", `{"path":"src/a.txt","mode":"rwx"}`, []string{`mode "rwx" is not an octal permission`}, true},
		{"executable marked", "list_files", `{"path":"src"}`, []string{"src/a.txt*  17"}, false},
		{"move", "move_file", `{"source":"src/a.txt","destination":"b.txt"}`, []string{"moved src/a.txt to b.txt"}, false},
		{"move onto existing", "move_file", `{"source":"bin.dat","destination":"b.txt"}`, []string{"SBX_EXISTS"}, true},
		{"delete non-empty dir needs recursive", "run_command", `{"command":"mkdir -p d/e && touch d/e/f"}`, []string{"exit code: 0"}, false},
		{"delete refused", "delete_file", `{"path":"d"}`, []string{"recursive"}, true},
		{"delete", "delete_file", `{"path":"d","recursive":true}`, []string{"deleted d"}, false},
		{"command exit code and stderr", "run_command", `{"command":"echo out; echo err >&2; exit 3","cwd":null}`, []string{"exit code: 3\n--- stdout ---\nout\n--- stderr ---\nerr"}, false},
		{"cwd", "run_command", `{"command":"pwd","cwd":"src"}`, []string{"/src"}, false},
		{"long output is cut and saved", "run_command", `{"command":"seq 1 100"}`, []string{"1\n2\n", "lines (", "bytes) omitted; the whole output is in ", ".sandboxkit/outputs/5-output.txt: read_file", "\n99\n100"}, false},
		{"saved output is readable", "read_file", `{"path":".sandboxkit/outputs/5-output.txt","offset":100}`, []string{"100\t100"}, false},
		{"timeout keeps partial output", "run_command", `{"command":"echo started; sleep 30","timeout_seconds":1}`, []string{"run_command failed: timed out: after 1s", "start_background", "started"}, true},
		// The message says what the kill did: here the command, its child and the
		// daemon it left outside its tree (setsid): sh, its sleep and the
		// daemon, counted by the sandbox.
		{"timeout says what was killed", "run_command", `{"command":"setsid sleep 31 & echo started; sleep 30","timeout_seconds":1}`, []string{"timed out", "the command was killed, with the 2 other processes it had started", "started"}, true},
		{"state does not carry over", "run_command", `{"command":"cd src; X=1"}`, []string{"exit code: 0"}, false},
		{"start background", "start_background", `{"command":"echo hello; sleep 30"}`, []string{"started job job-"}, false},
		{"python keeps state", "run_python", `{"code":"x = 6*7"}`, []string{"execution: 1"}, false},
		{"python result", "run_python", `{"code":"print('hi'); x","context_id":null}`, []string{"--- stdout ---\nhi", "--- result ---\n42"}, false},
		{"python exception is data", "run_python", `{"code":"1/0"}`, []string{"ZeroDivisionError: division by zero"}, false},
		{"bash keeps cwd", "bash", `{"command":"cd src && export Y=5"}`, []string{"session: default", "exit code: 0"}, false},
		{"bash state", "bash", `{"command":"echo $Y; pwd","session_id":null}`, []string{"5\n", "/src"}, false},
		{"bash still running", "bash", `{"command":"read line; echo got $line","timeout_seconds":1}`, []string{"still running"}, false},
		{"bash input", "bash", `{"input":"abc"}`, []string{"got abc", "exit code: 0"}, false},
		{"bash command and input", "bash", `{"command":"ls","input":"x"}`, []string{"command or input, not both"}, true},
		{"info", "sandbox_info", `{}`, []string{"isolation: ", "network: off", "command timeout: 1m0s default"}, false},
		{"unknown job", "read_background_output", `{"job_id":"job-999"}`, []string{"SBX_NOT_FOUND"}, true},
		// A name with a newline (a command can make one) is listed as one
		// quoted entry, not two; the tools refuse to make one.
		{"newline name from a command", "run_command", `{"command":"mkdir odd && printf x > \"odd/$(printf 'new\\nline.txt')\""}`, []string{"exit code: 0"}, false},
		{"newline name listed once, escaped", "list_files", `{"path":"odd"}`, []string{`"odd/new\nline.txt"  1`}, false},
		{"newline name found once, escaped", "find_files", `{"pattern":"new*"}`, []string{`"odd/new\nline.txt"`}, false},
		{"newline name refused", "write_file", `{"path":"odd/a\nb.txt","content":"x"}`, []string{"SBX_INVALID_ARGUMENT", "control character"}, true},
		// Text that is not valid UTF-8 says so.
		{"latin-1 file", "run_command", `{"command":"printf 'caf\\351\\n' > odd/latin1.txt"}`, []string{"exit code: 0"}, false},
		{"latin-1 read is flagged", "read_file", `{"path":"odd/latin1.txt"}`, []string{"1\tcaf", "not valid UTF-8"}, false},
		{"latin-1 match is flagged", "search_files", `{"pattern":"caf","path":"odd"}`, []string{"odd/latin1.txt:1:caf\uFFFD", "not valid UTF-8"}, false},
	}
	for _, s := range steps {
		res, err := kit.Call(ctx, s.tool, json.RawMessage(s.args))
		if err != nil {
			t.Fatalf("%s: Go error %v", s.name, err)
		}
		if res.IsError != s.wantError {
			t.Errorf("%s: IsError = %v, want %v; text:\n%s", s.name, res.IsError, s.wantError, res.Text)
		}
		for _, w := range s.want {
			if !strings.Contains(res.Text, w) {
				t.Errorf("%s: text does not contain %q:\n%s", s.name, w, res.Text)
			}
		}
	}
}

func TestBackgroundOutputIsReadOnce(t *testing.T) {
	ctx := context.Background()
	kit := toolkit.ForSandbox(newSandbox(t))
	call := func(tool, args string) string {
		t.Helper()
		res, err := kit.Call(ctx, tool, json.RawMessage(args))
		if err != nil || res.IsError {
			t.Fatalf("%s %s: %v %s", tool, args, err, res.Text)
		}
		return res.Text
	}
	started := call("start_background", `{"command":"echo first; sleep 0.3; echo second; sleep 30"}`)
	id := strings.Fields(strings.TrimPrefix(started, "started job "))[0]
	id = strings.TrimSuffix(id, ";")
	var seen string
	for range 100 {
		if seen += call("read_background_output", `{"job_id":"`+id+`"}`); strings.Contains(seen, "second") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if strings.Count(seen, "first") != 1 || !strings.Contains(seen, "second") {
		t.Fatalf("reads should show each line once:\n%s", seen)
	}
	if again := call("read_background_output", `{"job_id":"`+id+`"}`); !strings.Contains(again, "(no new output)") || !strings.Contains(again, "running") {
		t.Errorf("second read should have no new output:\n%s", again)
	}
	if all := call("read_background_output", `{"job_id":"`+id+`","from_start":true}`); !strings.Contains(all, "first") {
		t.Errorf("from_start should re-read:\n%s", all)
	}
	if list := call("list_background", ``); !strings.Contains(list, id+"  running") {
		t.Errorf("list:\n%s", list)
	}
	if stopped := call("stop_background", `{"job_id":"`+id+`"}`); !strings.Contains(stopped, id+": killed by") && !strings.Contains(stopped, "exited") {
		t.Errorf("stop:\n%s", stopped)
	}
}

func TestClosedSandboxIsAGoError(t *testing.T) {
	sb := newSandbox(t)
	kit := toolkit.ForSandbox(sb)
	sb.Close()
	if _, err := kit.Call(context.Background(), "read_file", json.RawMessage(`{"path":"a"}`)); err == nil {
		t.Fatal("want a Go error for a closed sandbox")
	}
}

func TestBuiltinAnnotationsAndTokenBudget(t *testing.T) {
	kit := toolkit.ForSandbox(nil)
	readOnly := map[string]bool{"read_file": true, "list_files": true, "search_files": true, "find_files": true, "sandbox_info": true, "read_background_output": true, "list_background": true}
	destructive := map[string]bool{"write_file": true, "edit_file": true, "move_file": true, "delete_file": true, "set_permissions": true}
	for _, tool := range kit.Tools() {
		a := tool.Annotations()
		if a.ReadOnly != readOnly[tool.Name()] || a.Destructive != destructive[tool.Name()] {
			t.Errorf("%s: annotations %+v", tool.Name(), a)
		}
		if _, ok := tool.StrictSchema(); !ok {
			t.Errorf("%s: schema cannot be strict", tool.Name())
		}
	}
	n := toolkit.EstimateTokens(kit.Tools())
	t.Logf("%d built-in tools: about %d tokens (bytes/4 of name+description+schema)", len(kit.Tools()), n)
	if n > 2500 {
		t.Errorf("tool definitions cost %d tokens, over the 2500 budget", n)
	}
}

func BenchmarkReadFile(b *testing.B) {
	ctx := context.Background()
	sb := newSandbox(b)
	if err := sb.Files.Write(ctx, "a.txt", []byte(strings.Repeat("some line of text\n", 50)), 0); err != nil {
		b.Fatal(err)
	}
	kit := toolkit.ForSandbox(sb)
	args := json.RawMessage(`{"path":"a.txt","offset":1,"limit":2000}`)
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			if _, err := sb.Files.Read(ctx, "a.txt", sandbox.ReadOptions{Limit: 2000, MaxBytes: 30000}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("toolkit", func(b *testing.B) {
		for b.Loop() {
			if res, err := kit.Call(ctx, "read_file", args); err != nil || res.IsError {
				b.Fatal(err, res.Text)
			}
		}
	})
}
