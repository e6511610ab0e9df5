package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox/fake"
	"github.com/sandboxkit/sandboxkit/toolkit"
)

// TestReadmeExample keeps the README's "Testing your agent offline" block
// equal to tool_test.go, which this package runs.
func TestReadmeExample(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("tool_test.go")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)<!-- file: examples/fake/tool_test.go -->\\s*```go\\n(.*?)```").FindSubmatch(readme)
	if block == nil {
		t.Fatal("README.md has no offline-testing block (marked <!-- file: examples/fake/tool_test.go -->)")
	}
	if strings.TrimSpace(string(block[1])) != strings.TrimSpace(string(src)) {
		t.Fatal("README.md's offline-testing example differs from examples/fake/tool_test.go: copy the file into the README")
	}
}

// TestMainOnARealSandbox runs the program: the same tool on the local
// backend finds the TODO main writes.
func TestMainOnARealSandbox(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the program")
	}
	out, err := exec.Command("go", "run", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go run: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "1 TODOs:\n./main.py:1:print('hi')  # TODO: greet by name") {
		t.Fatalf("unexpected output:\n%s", out)
	}
}

// TestBuiltinToolsOnTheFake drives the built-in tools the way a model
// would, showing they work on the fake unchanged: files for real (in
// memory), commands, Python and bash from the script, and errors with the
// codes the model would see on a real sandbox.
func TestBuiltinToolsOnTheFake(t *testing.T) {
	sb, fk := fake.New(t)
	fk.Script.Command(fake.Regexp(`^python3 -m pytest`), fake.Reply{Stdout: "1 passed\n"})
	fk.Script.Python(fake.Exact("sum(range(10))"), fake.PythonReply{Result: "45"})
	png := []byte("\x89PNG\r\n\x1a\n fake image bytes")
	fk.Script.Python(fake.Regexp(`plt\.plot`), fake.PythonReply{Displays: []map[string][]byte{{"image/png": png, "text/plain": []byte("<Figure>")}}})
	fk.Script.Shell(fake.Exact("cd src && ls"), fake.ShellReply{Output: "app.py\n", Cwd: "src"})
	fk.Script.Command(fake.Exact("python3 -m http.server 8000"), fake.Reply{Stdout: "Serving HTTP on 0.0.0.0 port 8000\n", Hang: true})
	kit := toolkit.ForSandbox(sb)
	ctx := context.Background()
	for _, c := range []struct {
		tool, args, want string
		isError          bool
	}{
		{"write_file", `{"path":"src/app.py","content":"x = 1\n"}`, "wrote 6 bytes to src/app.py", false},
		{"read_file", `{"path":"src/app.py"}`, "x = 1", false},
		{"edit_file", `{"path":"src/app.py","old_text":"x = 1","new_text":"x = 2"}`, "", false},
		{"search_files", `{"pattern":"x = 2"}`, "src/app.py:1:x = 2", false},
		{"find_files", `{"pattern":"*.py"}`, "src/app.py", false},
		{"read_file", `{"path":"../etc/passwd"}`, "SBX_PATH_ESCAPE", true},
		{"read_file", `{"path":"missing.txt"}`, "SBX_NOT_FOUND", true},
		{"run_command", `{"command":"python3 -m pytest -q"}`, "1 passed", false},
		{"run_python", `{"code":"sum(range(10))"}`, "45", false},
		{"bash", `{"command":"cd src && ls"}`, "app.py", false},
		{"start_background", `{"command":"python3 -m http.server 8000"}`, "job-1", false},
		{"read_background_output", `{"job_id":"job-1"}`, "Serving HTTP", false},
		{"list_background", `{}`, "running", false},
		{"stop_background", `{"job_id":"job-1"}`, "job-1", false},
		{"read_background_output", `{"job_id":"job-9"}`, "SBX_NOT_FOUND", true},
	} {
		res, err := kit.Call(ctx, c.tool, json.RawMessage(c.args))
		if err != nil {
			t.Fatalf("%s %s: %v", c.tool, c.args, err)
		}
		if res.IsError != c.isError || !strings.Contains(res.Text, c.want) {
			t.Errorf("%s %s: IsError=%v text %q, want IsError=%v and %q", c.tool, c.args, res.IsError, res.Text, c.isError, c.want)
		}
	}
	res, err := kit.Call(ctx, "run_python", json.RawMessage(`{"code":"import matplotlib.pyplot as plt\nplt.plot([1, 2])"}`))
	if err != nil || res.IsError || len(res.Images) != 1 || res.Images[0].MIMEType != "image/png" || string(res.Images[0].Data) != string(png) {
		t.Errorf("run_python with a plot: %+v %v", res, err)
	}
	if info := sb.Info(); info.Backend != "fake" || info.Network {
		t.Errorf("Info: backend %q, network %v", info.Backend, info.Network)
	}
}
