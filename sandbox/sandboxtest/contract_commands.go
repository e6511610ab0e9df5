package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

var environmentTests = []contractTest{
	{name: "MinimalEnvironmentWithoutHostVariables", serial: true, run: testMinimalEnv},
}

func testMinimalEnv(t *testing.T, newSandbox Factory) {
	// The agent's API key lives in the host process: it must never reach
	// the sandbox, whatever the backend inherits.
	const fake = "sk-sandboxkit-contract-fake-key"
	t.Setenv("OPENAI_API_KEY", fake)
	t.Setenv("SANDBOXKIT_CONTRACT_HOST_ONLY", "1")
	b := open(t, newSandbox, sandbox.WithEnv(map[string]string{"ADDED_BY_CALLER": "yes"}))
	res := b.run(sandbox.Command{Args: []string{"env"}})
	if strings.Contains(res.Stdout, fake) || strings.Contains(res.Stdout, "SANDBOXKIT_CONTRACT_HOST_ONLY") {
		t.Fatalf("a host variable reached the sandbox:\n%s", res.Stdout)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	keys := make([]string, 0, len(got))
	for k := range got {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := []string{"ADDED_BY_CALLER", "HOME", "LANG", "PATH", "TERM"}
	if !slices.Equal(keys, want) {
		t.Fatalf("environment has %v, want exactly %v:\n%s", keys, want, res.Stdout)
	}
	if got["TERM"] != "dumb" || got["ADDED_BY_CALLER"] != "yes" {
		t.Fatalf("TERM=%q ADDED_BY_CALLER=%q, want dumb and yes", got["TERM"], got["ADDED_BY_CALLER"])
	}
	// Per-command variables are added for that command only.
	res = b.run(sandbox.Command{Shell: `echo "$PER_CMD"`, Env: map[string]string{"PER_CMD": "v1"}})
	if res.Stdout != "v1\n" {
		t.Fatalf("per-command env: got %q", res.Stdout)
	}
	res = b.run(sandbox.Command{Shell: `echo "${PER_CMD-unset}"`})
	if res.Stdout != "unset\n" {
		t.Fatalf("per-command env leaked into the next command: got %q", res.Stdout)
	}
}

var commandTests = []contractTest{
	{name: "ArgvIsPassedUnchanged", run: testArgv},
	{name: "ShellStringRunsUnderSh", run: testShell},
	{name: "DirIsRelativeToWorkspace", run: testDir},
	{name: "StdinIsCopiedToTheCommand", run: testStdin},
	{name: "NonZeroExitIsData", run: testExitCode},
	{name: "MissingProgramIsNotFound", run: testMissingProgram},
	{name: "OutputStreamsInOrderWhileRunning", run: testStreaming},
	{name: "TimeoutKillsTreeAndReturnsPartialOutput", run: testTimeoutPartial},
	{name: "TimeoutKillsChildIgnoringSIGTERM", run: testTimeoutIgnoresTerm},
	{name: "TimeoutKillsChildHoldingThePipe", run: testTimeoutPipeHolder},
	{name: "TimeoutKillsDaemonsThatLeftTheTree", run: testTimeoutDaemons},
	{name: "CancelKillsDaemonsThatLeftTheTree", run: testCancelDaemons},
	{name: "BackgroundChildDoesNotHangRun", run: testBackgroundChild},
	{name: "TimeoutAboveMaximumIsRefused", run: testMaxTimeout},
	{name: "OutputPastCapIsCutWithMarker", run: testOutputCap},
	{name: "ConcurrentCommandsDoNotBlockEachOther", run: testConcurrentCommands},
	{name: "OutputFileHoldsTheWholeOutput", run: testOutputFile},
	{name: "OutputFileCapIsCountedAndErrorsReported", run: testOutputFileCap},
	{name: "SlowConsumerGetsEveryByte", run: testSlowConsumer},
	{name: "ConcurrentLargeOutputsArriveWhole", run: testConcurrentLargeOutputs},
	{name: "HundredsOfCommandsAtOnceDegradeWithACode", run: testManyCommandsAtOnce},
}

// testManyCommandsAtOnce: 700 commands at once in one sandbox. Each either
// runs and returns its own output, or fails with a coded error that says
// what to do (SBX_BUSY when the agent has no descriptors left for it);
// none returns exit 0 with empty or wrong output, none fails with "too
// many open files", and the sandbox stays usable. The agent ran out of
// descriptors from ~450 at once, and from 700 some returned exit 0 with
// an empty stdout.
func testManyCommandsAtOnce(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox, sandbox.WithLimits(sandbox.Limits{Pids: 4096}))
	const n = 700
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[sandbox.Code]int{}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := b.sb.Commands.Run(b.ctx(), sandbox.Command{Shell: fmt.Sprintf("sleep 3; echo %d", i), Timeout: 50 * time.Second})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil && strings.Contains(strings.ToLower(err.Error()), "too many open files"):
				t.Errorf("run %d: %v", i, err)
			case err != nil && sandbox.CodeOf(err) != sandbox.CodeBusy:
				t.Errorf("run %d failed with %v, want success or SBX_BUSY", i, err)
			case err != nil:
				codes[sandbox.CodeOf(err)]++
			case res.ExitCode != 0 || res.Stdout != fmt.Sprintf("%d\n", i):
				t.Errorf("run %d: exit %d stdout %q stderr %q, want %q", i, res.ExitCode, res.Stdout, res.Stderr, fmt.Sprintf("%d\n", i))
			default:
				codes["ok"]++
			}
		}()
	}
	wg.Wait()
	t.Logf("700 commands at once: %v", codes)
	if codes["ok"] < 100 {
		t.Errorf("only %d of %d commands ran", codes["ok"], n)
	}
	b.usable()
}

// seqBytes is len(`seq 1 200000`).
const seqBytes = 1288895

// testOutputFile: the whole output of a command is in its OutputFile, its
// line count equal to the output's, while the Result keeps the head and
// the tail (the last line, the one a model needs) and counts the middle.
func testOutputFile(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox, sandbox.WithLimits(sandbox.Limits{MaxOutputBytes: 32 << 10}))
	const file = ".sandboxkit/outputs/1-output.txt"
	res := b.run(sandbox.Command{Args: []string{"seq", "1", "200000"}, OutputFile: file})
	if res.OutputFile != file || res.OutputFileBytes != seqBytes || res.OutputFileCut != 0 || res.OutputFileError != "" {
		t.Fatalf("output file report %+v, want %s with %d bytes, none cut, no error", res.OutputFileInfo, file, seqBytes)
	}
	if !strings.HasSuffix(res.Stdout, "\n199999\n200000\n") {
		t.Fatalf("the last line is not in the result's tail: ...%q", res.Stdout[max(0, len(res.Stdout)-40):])
	}
	if int64(len(res.Stdout))-int64(len(cutMarkerOf(res.Stdout)))+res.StdoutDropped != seqBytes {
		t.Fatalf("kept %d bytes and dropped %d of %d: bytes lost without a count", len(res.Stdout), res.StdoutDropped, seqBytes)
	}
	data := b.read(file)
	if lines := strings.Count(data, "\n"); lines != 200000 || !strings.HasPrefix(data, "1\n2\n") || !strings.HasSuffix(data, "\n200000\n") {
		t.Fatalf("the output file has %d lines (%d bytes), want all 200000", lines, len(data))
	}
	// stdout and stderr go to one file in order of arrival; an absolute
	// path under the workspace works too, and an existing file is replaced.
	abs := b.sb.Info().Workspace + "/" + file
	res = b.run(sandbox.Command{Shell: "echo out; sleep 0.5; echo err >&2; sleep 0.5; echo out2", OutputFile: abs})
	if got := b.read(file); got != "out\nerr\nout2\n" || res.OutputFileBytes != int64(len(got)) {
		t.Fatalf("output file %q (%d bytes reported), want \"out\\nerr\\nout2\\n\"", got, res.OutputFileBytes)
	}
	// A background job writes its file too; its status reports it.
	j, err := b.sb.Commands.Start(b.ctx(), sandbox.Command{Args: []string{"seq", "1", "200000"}, OutputFile: "job-out.txt"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := j.Wait(b.ctx())
	if err != nil {
		t.Fatal(err)
	}
	if st.OutputFile != "job-out.txt" || st.OutputFileBytes != seqBytes || st.OutputFileCut != 0 || st.OutputFileError != "" {
		t.Fatalf("job output file report %+v", st.OutputFileInfo)
	}
	if got := b.read("job-out.txt"); strings.Count(got, "\n") != 200000 {
		t.Fatalf("the job's output file has %d lines, want 200000", strings.Count(got, "\n"))
	}
	_, err = b.sb.Commands.Run(b.ctx(), sandbox.Command{Args: []string{"true"}, OutputFile: "../outside.txt"})
	wantCode(t, "output file outside the workspace", err, sandbox.CodePathEscape)
}

// cutMarkerOf returns the cut marker in s ("" if none).
func cutMarkerOf(s string) string {
	i := strings.Index(s, "\n[... sandboxkit:")
	if i < 0 {
		return ""
	}
	j := strings.Index(s[i:], "...]\n")
	if j < 0 {
		return ""
	}
	return s[i : i+j+len("...]\n")]
}

// testOutputFileCap: past OutputFileLimit bytes are counted, not written;
// a write that fails is reported with the bytes written before it.
func testOutputFileCap(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox, sandbox.WithLimits(sandbox.Limits{MaxOutputBytes: 2 << 20}))
	res := b.run(sandbox.Command{Args: []string{"seq", "1", "200000"}, OutputFile: "capped.txt", OutputFileLimit: 1000})
	if res.OutputFileBytes != 1000 || res.OutputFileCut != seqBytes-1000 || res.OutputFileError != "" {
		t.Fatalf("capped output file report %+v, want 1000 bytes and %d cut", res.OutputFileInfo, seqBytes-1000)
	}
	if got := b.read("capped.txt"); len(got) != 1000 || !strings.HasPrefix(got, "1\n2\n") {
		t.Fatalf("capped file has %d bytes", len(got))
	}
	if !strings.HasSuffix(res.Stdout, "\n200000\n") || res.StdoutDropped != 0 {
		t.Fatalf("the file's cap cut the result too: %d bytes, %d dropped", len(res.Stdout), res.StdoutDropped)
	}
	_, err := b.sb.Commands.Run(b.ctx(), sandbox.Command{Args: []string{"true"}, OutputFile: "x.txt", OutputFileLimit: -1})
	wantCode(t, "negative output file limit", err, sandbox.CodeInvalidArgument)
	// A file that cannot be made does not stop the command; the result
	// says why there is no file.
	b.write("plainfile", "x")
	res = b.run(sandbox.Command{Args: []string{"echo", "ran"}, OutputFile: "plainfile/sub/out.txt"})
	if res.Stdout != "ran\n" || res.OutputFileError == "" || res.OutputFileBytes != 0 {
		t.Fatalf("output file under a regular file: stdout %q report %+v, want the command run and an error", res.Stdout, res.OutputFileInfo)
	}
}

// testSlowConsumer: a caller that takes its output slowly still gets all
// of it. The agent used to stop reading 200 ms after the command exited:
// an OnOutput callback sleeping 150 ms got 262,144 of 300,000 bytes, with
// exit 0 and nothing counted as dropped.
func testSlowConsumer(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox, sandbox.WithLimits(sandbox.Limits{MaxOutputBytes: 1 << 20}))
	var got int
	res := b.run(sandbox.Command{
		Shell: "head -c 300000 /dev/zero | tr '\\0' x",
		OnOutput: func(c sandbox.Chunk) {
			got += len(c.Data)
			time.Sleep(150 * time.Millisecond)
		},
	})
	if got != 300000 || len(res.Stdout) != 300000 || res.StdoutDropped != 0 {
		t.Fatalf("OnOutput got %d bytes, the result %d (%d dropped), of 300000 printed", got, len(res.Stdout), res.StdoutDropped)
	}
}

// testConcurrentLargeOutputs: many commands at once each return their
// whole output (200 runs of 200 KB returned 155-172 KB each, exit 0 and
// nothing counted, when the agent cut reading 200 ms after each exit).
func testConcurrentLargeOutputs(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox, sandbox.WithLimits(sandbox.Limits{MaxOutputBytes: 1 << 20}))
	const runs, size = 200, 200000
	var wg sync.WaitGroup
	var mu sync.Mutex
	short := map[int]int{}
	var slow atomic.Int64
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// One process per run: 200 pipelines would pass the default
			// pids limit, and a shell whose fork fails in a pipeline exits
			// with the last command's status, 0, and prints nothing.
			// A consumer that takes ~32 MB/s, as a caller doing any work
			// with the output would (or a loaded machine): the 200 streams
			// then wait on the shared connection, as they did under load.
			res, err := b.sb.Commands.Run(b.ctx(), sandbox.Command{Args: []string{"head", "-c", strconv.Itoa(size), "/dev/zero"},
				OnOutput: func(c sandbox.Chunk) {
					if slow.Add(int64(len(c.Data)))%(64<<10) < int64(len(c.Data)) {
						time.Sleep(2 * time.Millisecond)
					}
				}})
			if err != nil {
				t.Errorf("run %d: %v", i, err)
				return
			}
			if len(res.Stdout) != size || res.StdoutDropped != 0 || res.ExitCode != 0 {
				mu.Lock()
				short[i] = len(res.Stdout)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(short) > 0 {
		t.Fatalf("%d of %d concurrent runs returned short output with nothing counted (run: bytes) %v", len(short), runs, short)
	}
}

func testArgv(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	res := b.run(sandbox.Command{Args: []string{"printf", "[%s]", "two words", "$HOME", "'q'", ""}})
	if res.Stdout != "[two words][$HOME]['q'][]" {
		t.Fatalf("argv was not passed unchanged: %q", res.Stdout)
	}
	if res.Duration <= 0 {
		t.Fatalf("Duration = %v, want > 0", res.Duration)
	}
	_, err := b.sb.Commands.Run(b.ctx(), sandbox.Command{Args: []string{"true"}, Shell: "true"})
	wantCode(t, "Args and Shell together", err, sandbox.CodeInvalidArgument)
	_, err = b.sb.Commands.Run(b.ctx(), sandbox.Command{})
	wantCode(t, "empty command", err, sandbox.CodeInvalidArgument)
}

func testShell(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	res := b.run(sandbox.Command{Shell: `x=$((6*7)); echo "$x" | tr 4 X; echo err >&2`})
	if res.Stdout != "X2\n" || res.Stderr != "err\n" {
		t.Fatalf("stdout %q stderr %q, want \"X2\\n\" and \"err\\n\"", res.Stdout, res.Stderr)
	}
}

func testDir(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	if err := b.sb.Files.Mkdir(b.ctx(), "sub/deeper"); err != nil {
		t.Fatal(err)
	}
	ws := b.sb.Info().Workspace
	for _, tc := range []struct{ dir, want string }{
		{"", ws},
		{"sub/deeper", ws + "/sub/deeper"},
		{ws + "/sub", ws + "/sub"},
	} {
		res := b.run(sandbox.Command{Args: []string{"pwd"}, Dir: tc.dir})
		if got := strings.TrimSpace(res.Stdout); got != tc.want {
			t.Errorf("Dir %q: pwd = %q, want %q", tc.dir, got, tc.want)
		}
	}
	_, err := b.sb.Commands.Run(b.ctx(), sandbox.Command{Args: []string{"pwd"}, Dir: "../.."})
	wantCode(t, "Dir ../..", err, sandbox.CodePathEscape)
	_, err = b.sb.Commands.Run(b.ctx(), sandbox.Command{Args: []string{"pwd"}, Dir: "no-such-dir"})
	wantCode(t, "missing Dir", err, sandbox.CodeNotFound)
}

func testStdin(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	res := b.run(sandbox.Command{Args: []string{"wc", "-l"}, Stdin: strings.NewReader("a\nb\nc\n")})
	if strings.TrimSpace(res.Stdout) != "3" {
		t.Fatalf("wc -l of 3 lines printed %q", res.Stdout)
	}
	// More than the protocol's flow-control window: stdin must be paced,
	// not dropped or deadlocked.
	const n = 3<<20 + 17
	res = b.run(sandbox.Command{Args: []string{"wc", "-c"}, Stdin: strings.NewReader(strings.Repeat("z", n))})
	if strings.TrimSpace(res.Stdout) != fmt.Sprint(n) {
		t.Fatalf("wc -c of %d bytes printed %q", n, res.Stdout)
	}
	// Without Stdin a command reads end of file at once instead of hanging.
	res = b.run(sandbox.Command{Args: []string{"cat"}, Timeout: 10 * time.Second})
	if res.Stdout != "" {
		t.Fatalf("cat without stdin printed %q", res.Stdout)
	}
}

func testExitCode(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	for _, tc := range []struct {
		shell  string
		code   int
		signal string
	}{
		{"exit 0", 0, ""},
		{"echo partial; exit 7", 7, ""},
		{"kill -9 $$", 137, "SIGKILL"},
	} {
		res, err := b.sb.Commands.Run(b.ctx(), sandbox.Command{Shell: tc.shell})
		if err != nil {
			t.Fatalf("%q: a finished command is not an error: %v", tc.shell, err)
		}
		if res.ExitCode != tc.code || res.Signal != tc.signal {
			t.Errorf("%q: exit %d signal %q, want %d %q", tc.shell, res.ExitCode, res.Signal, tc.code, tc.signal)
		}
	}
}

func testMissingProgram(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	_, err := b.sb.Commands.Run(b.ctx(), sandbox.Command{Args: []string{"sandboxkit-no-such-program"}})
	wantCode(t, "missing program", err, sandbox.CodeNotFound)
	if !strings.Contains(err.Error(), "sandboxkit-no-such-program") {
		t.Fatalf("the error does not name the program: %v", err)
	}
	b.usable()
}

func testStreaming(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	// The command waits for a file that the test writes only after it
	// has received the first chunk: it finishes only if output streams
	// while the command runs.
	var mu sync.Mutex
	var out, errOut strings.Builder
	var chunks int
	released := make(chan struct{})
	var once sync.Once
	cmd := sandbox.Command{
		Shell: `for i in 1 2 3; do echo out$i; echo err$i >&2; done
while [ ! -e go ]; do sleep 0.01; done
for i in 4 5 6; do echo out$i; echo err$i >&2; done`,
		Timeout: 20 * time.Second,
		OnOutput: func(c sandbox.Chunk) {
			mu.Lock()
			defer mu.Unlock()
			chunks++
			if c.Stream == sandbox.Stdout {
				out.Write(c.Data)
			} else {
				errOut.Write(c.Data)
			}
			if strings.Contains(out.String(), "out3") {
				// Not on the reader goroutine: the write needs a reply.
				once.Do(func() {
					go func() {
						defer close(released)
						if err := b.sb.Files.Write(b.ctx(), "go", nil, 0); err != nil {
							t.Errorf("Write(go): %v", err)
						}
					}()
				})
			}
		},
	}
	res, err := b.sb.Commands.Run(b.ctx(), cmd)
	if err != nil {
		t.Fatalf("the command did not finish (output was not streamed while it ran?): %v", err)
	}
	<-released
	mu.Lock()
	defer mu.Unlock()
	wantOut, wantErr := "out1\nout2\nout3\nout4\nout5\nout6\n", "err1\nerr2\nerr3\nerr4\nerr5\nerr6\n"
	if out.String() != wantOut || errOut.String() != wantErr {
		t.Fatalf("streamed stdout %q stderr %q, want %q %q", out.String(), errOut.String(), wantOut, wantErr)
	}
	if res.Stdout != wantOut || res.Stderr != wantErr {
		t.Fatalf("result stdout %q stderr %q, want %q %q", res.Stdout, res.Stderr, wantOut, wantErr)
	}
	if chunks < 2 {
		t.Fatalf("%d chunks, want several", chunks)
	}
}

func testTimeoutPartial(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	start := time.Now()
	res, err := b.sb.Commands.Run(b.ctx(), sandbox.Command{
		Shell:   "echo before; echo on-stderr >&2; " + b.sleep() + " & " + b.sleep() + "; echo never",
		Timeout: 300 * time.Millisecond,
	})
	if !errors.Is(err, sandbox.ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	if res == nil {
		t.Fatal("no partial result with the timeout error")
	}
	if !res.TimedOut || res.Stdout != "before\n" || res.Stderr != "on-stderr\n" {
		t.Fatalf("partial result %+v, want TimedOut with stdout \"before\\n\" and stderr \"on-stderr\\n\"", res)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Run returned after %s for a 300ms timeout", d)
	}
	expectNoSurvivors(t, b.marker, "the command's timeout")
	b.usable()
}

func testTimeoutIgnoresTerm(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	res, err := b.sb.Commands.Run(b.ctx(), sandbox.Command{
		Shell:   `trap "" TERM; (trap "" TERM; ` + b.sleep() + `) & ` + b.sleep() + `; ` + b.sleep(),
		Timeout: 300 * time.Millisecond,
	})
	if !errors.Is(err, sandbox.ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	if res.Signal != "SIGKILL" {
		t.Fatalf("a shell ignoring SIGTERM ended with signal %q exit %d, want SIGKILL", res.Signal, res.ExitCode)
	}
	expectNoSurvivors(t, b.marker, "the command's timeout")
	b.usable()
}

func testTimeoutPipeHolder(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	// setsid leaves the process group; the child keeps stdout open.
	res, err := b.sb.Commands.Run(b.ctx(), sandbox.Command{
		Shell:   "setsid " + b.sleep() + " & echo started; " + b.sleep(),
		Timeout: 300 * time.Millisecond,
	})
	if !errors.Is(err, sandbox.ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	if res.Stdout != "started\n" {
		t.Fatalf("stdout %q, want \"started\\n\"", res.Stdout)
	}
	expectNoSurvivors(t, b.marker, "the command's timeout")
	b.usable()
}

// daemons is a shell fragment starting three processes that leave the
// command's process tree: a double fork through a setsid shell, a double
// fork that closes the output, and a subshell's setsid child (each
// re-parented to the agent once its parent exits).
func (b *box) daemons() string {
	return "setsid sh -c '" + b.sleep() + " &'; sh -c '" + b.sleep() + " >/dev/null 2>&1 &'; (setsid " + b.sleep() + " &); "
}

// testTimeoutDaemons: a timeout kills every process the command started,
// also daemons that left its tree (they survived until Close before, while
// the message said "the command and its children were killed").
func testTimeoutDaemons(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	res, err := b.sb.Commands.Run(b.ctx(), sandbox.Command{Shell: b.daemons() + b.sleep(), Timeout: 2 * time.Second})
	if !errors.Is(err, sandbox.ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	expectNoSurvivors(t, b.marker, "the command's timeout (before Close)")
	if !strings.Contains(err.Error(), "other processes it had started") || strings.Contains(err.Error(), "could not be killed") {
		t.Fatalf("the timeout's message does not say what was killed: %v", err)
	}
	if res.Killed < 3 || len(res.Survivors) > 0 {
		t.Fatalf("Killed = %d, Survivors = %v; want the three daemons (and the shell's sleep) killed, none surviving", res.Killed, res.Survivors)
	}
	b.usable()
}

// testCancelDaemons: cancelling a run's context does the same.
func testCancelDaemons(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	ctx, cancel := context.WithCancel(b.ctx())
	done := make(chan error, 1)
	go func() {
		_, err := b.sb.Commands.Run(ctx, sandbox.Command{Shell: b.daemons() + b.sleep()})
		done <- err
	}()
	waitMarked(t, b.marker, 5) // three daemons, the shell and its sleep
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) && sandbox.CodeOf(err) != sandbox.CodeCanceled {
		t.Fatalf("err = %v, want a cancellation", err)
	}
	expectNoSurvivors(t, b.marker, "the cancelled run (before Close)")
	b.usable()
}

func testBackgroundChild(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	// The main process exits at once; a daemon it left keeps the pipe.
	start := time.Now()
	res := b.run(sandbox.Command{Shell: "setsid " + b.sleep() + " & echo main-done", Timeout: 30 * time.Second})
	if res.Stdout != "main-done\n" {
		t.Fatalf("stdout %q", res.Stdout)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Run waited %s for a daemon holding the pipe", d)
	}
	// The agent stopped reading early because of it, and says so.
	if len(res.LeftRunning) == 0 {
		t.Fatalf("LeftRunning is empty, yet a daemon held the output open when the command exited")
	}
	waitMarked(t, b.marker, 1) // it lives until Close, which must kill it
	// A command whose children all closed the output reports none.
	if res := b.run(sandbox.Command{Shell: "setsid " + b.sleep() + " >/dev/null 2>&1 & echo ok"}); len(res.LeftRunning) != 0 {
		t.Fatalf("LeftRunning = %v for a daemon that does not hold the output", res.LeftRunning)
	}
}

func testMaxTimeout(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox, sandbox.WithLimits(sandbox.Limits{Timeout: time.Second, MaxTimeout: 2 * time.Second}))
	_, err := b.sb.Commands.Run(b.ctx(), sandbox.Command{Args: []string{"true"}, Timeout: time.Hour})
	wantCode(t, "timeout over the maximum", err, sandbox.CodeInvalidArgument)
	_, err = b.sb.Commands.Run(b.ctx(), sandbox.Command{Args: []string{"true"}, Timeout: -time.Second})
	wantCode(t, "negative timeout", err, sandbox.CodeInvalidArgument)
	// The sandbox's default timeout applies when the command sets none.
	_, err = b.sb.Commands.Run(b.ctx(), sandbox.Command{Args: []string{"sleep", b.marker}})
	if !errors.Is(err, sandbox.ErrTimeout) {
		t.Fatalf("the default timeout of 1s did not apply: %v", err)
	}
}

func testOutputCap(t *testing.T, newSandbox Factory) {
	const limit = 64 << 10
	b := open(t, newSandbox, sandbox.WithLimits(sandbox.Limits{MaxOutputBytes: limit}))
	// seq prints 7 MB with a known head and tail.
	var streamed int
	res := b.run(sandbox.Command{
		Args:     []string{"seq", "1", "1000000"},
		OnOutput: func(c sandbox.Chunk) { streamed += len(c.Data) },
	})
	const total = 6888896 // len of `seq 1 1000000`
	if want := int64(total - limit); res.StdoutDropped != want {
		t.Fatalf("StdoutDropped = %d, want %d", res.StdoutDropped, want)
	}
	if !strings.HasPrefix(res.Stdout, "1\n2\n3\n") || !strings.HasSuffix(res.Stdout, "999999\n1000000\n") {
		t.Fatalf("the head or tail of the output is missing: %q ... %q", res.Stdout[:20], res.Stdout[len(res.Stdout)-20:])
	}
	if !strings.Contains(res.Stdout, fmt.Sprintf("%d bytes", res.StdoutDropped)) {
		t.Fatalf("no marker saying how many bytes were cut in the output")
	}
	if len(res.Stdout) > limit+200 {
		t.Fatalf("kept %d bytes of output, the cap is %d", len(res.Stdout), limit)
	}
	if streamed > limit+200 {
		t.Fatalf("streamed %d bytes to OnOutput, the cap is %d", streamed, limit)
	}
	// stderr has its own cap.
	res = b.run(sandbox.Command{Shell: "seq 1 1000000 >&2; echo small"})
	if res.Stdout != "small\n" || res.StderrDropped != total-limit || res.StdoutDropped != 0 {
		t.Fatalf("stdout %q StdoutDropped %d StderrDropped %d", res.Stdout, res.StdoutDropped, res.StderrDropped)
	}
}

func testConcurrentCommands(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox, sandbox.WithLimits(sandbox.Limits{MaxOutputBytes: 4 << 10}))
	// A flood on one request must not starve a small one on the same
	// stream.
	flood := make(chan error, 1)
	go func() {
		_, err := b.sb.Commands.Run(b.ctx(), sandbox.Command{Args: []string{"yes", b.marker}, Timeout: 3 * time.Second})
		flood <- err
	}()
	waitMarked(t, b.marker, 1)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := b.sb.Commands.Run(b.ctx(), sandbox.Command{Args: []string{"echo", fmt.Sprint(i)}})
			if err != nil || res.Stdout != fmt.Sprintf("%d\n", i) {
				t.Errorf("echo %d beside a flood: %v %+v", i, err, res)
			}
		}()
	}
	wg.Wait()
	if err := <-flood; !errors.Is(err, sandbox.ErrTimeout) {
		t.Fatalf("the flood ended with %v, want ErrTimeout", err)
	}
	expectNoSurvivors(t, b.marker, "the flood's timeout")
}

var _ = os.Getpid
