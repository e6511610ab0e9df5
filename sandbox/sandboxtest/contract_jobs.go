package sandboxtest

import (
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

var jobTests = []contractTest{
	{name: "OutputIsReadIncrementallyFromACursor", run: testJobOutputCursor},
	{name: "StdinWriteAndClose", run: testJobStdin},
	{name: "StdinFromReader", run: testJobStdinReader},
	{name: "WaitReportsExitCode", run: testJobWait},
	{name: "KillEndsTreeIgnoringSIGTERM", run: testJobKill},
	{name: "TimeoutEndsJob", run: testJobTimeout},
	{name: "KillEndsDaemonsThatLeftTheTree", run: testJobKillDaemons},
	{name: "KillAfterExitEndsTheDaemonsLeft", run: testJobKillAfterExit},
	{name: "TimeoutEndsDaemonsThatLeftTheTree", run: testJobTimeoutDaemons},
	{name: "ListShowsRunningAndEnded", run: testJobList},
	{name: "RingBufferReportsDroppedBytes", run: testJobRing},
	{name: "UnknownJobIsNotFound", run: testJobUnknown},
	{name: "CloseKillsJobsAndDaemons", run: testJobCloseKills},
}

// pollOutput reads a job's output from since until it contains want.
func pollOutput(t *testing.T, b *box, j *sandbox.Job, since int64, want string) *sandbox.JobOutput {
	t.Helper()
	var acc strings.Builder
	var last *sandbox.JobOutput
	eventually(t, "job output "+want, 10*time.Second, func() bool {
		out, err := j.Output(b.ctx(), since)
		if err != nil {
			t.Fatalf("Output(%d): %v", since, err)
		}
		acc.WriteString(out.Data)
		since = out.Next
		last = out
		return strings.Contains(acc.String(), want)
	})
	last.Data = acc.String()
	return last
}

func testJobOutputCursor(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	j, err := b.sb.Commands.Start(b.ctx(), sandbox.Command{Shell: "echo first; read x; echo second $x; " + b.sleep(), OpenStdin: true})
	if err != nil {
		t.Fatal(err)
	}
	if j.ID == "" {
		t.Fatal("the job has no ID")
	}
	out := pollOutput(t, b, j, 0, "first\n")
	if out.Data != "first\n" || out.Next != 6 || out.Dropped != 0 {
		t.Fatalf("first read: %+v", out)
	}
	if !out.Status.Running || out.Status.PID == 0 {
		t.Fatalf("status while running: %+v", out.Status)
	}
	cursor := out.Next
	if err := j.Write(b.ctx(), []byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	out = pollOutput(t, b, j, cursor, "second hello\n")
	if out.Data != "second hello\n" {
		t.Fatalf("read from cursor %d returned %q: it must not repeat earlier output", cursor, out.Data)
	}
	// Reading again from the end returns nothing new.
	again, err := j.Output(b.ctx(), out.Next)
	if err != nil || again.Data != "" || again.Next != out.Next {
		t.Fatalf("read at the end: %+v %v", again, err)
	}
	st, err := j.Status(b.ctx())
	if err != nil || !st.Running || st.Written != int64(len("first\nsecond hello\n")) {
		t.Fatalf("Status: %+v %v", st, err)
	}
	_, err = j.Output(b.ctx(), -1)
	wantCode(t, "negative cursor", err, sandbox.CodeInvalidArgument)
}

func testJobStdin(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	j, err := b.sb.Commands.Start(b.ctx(), sandbox.Command{Shell: "cat; echo eof-seen", OpenStdin: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range []string{"abc", "def\n"} {
		if err := j.Write(b.ctx(), []byte(part)); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.CloseStdin(b.ctx()); err != nil {
		t.Fatal(err)
	}
	st, err := j.Wait(b.ctx())
	if err != nil || st.Running || st.ExitCode != 0 {
		t.Fatalf("Wait: %+v %v", st, err)
	}
	out, err := j.Output(b.ctx(), 0)
	if err != nil || out.Data != "abcdef\neof-seen\n" {
		t.Fatalf("Output: %q %v", out.Data, err)
	}
	// Stdin is gone once closed, and a job started without it has none.
	wantCode(t, "write after close", j.Write(b.ctx(), []byte("x")), sandbox.CodeInvalidArgument)
	j2, err := b.sb.Commands.Start(b.ctx(), sandbox.Command{Args: []string{"sleep", b.marker}})
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, "write to a job without stdin", j2.Write(b.ctx(), []byte("x")), sandbox.CodeInvalidArgument)
}

func testJobStdinReader(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	j, err := b.sb.Commands.Start(b.ctx(), sandbox.Command{Args: []string{"wc", "-c"}, Stdin: strings.NewReader(strings.Repeat("q", 100000))})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := j.Wait(b.ctx()); err != nil || st.ExitCode != 0 {
		t.Fatalf("Wait: %+v %v", st, err)
	}
	out, _ := j.Output(b.ctx(), 0)
	if strings.TrimSpace(out.Data) != "100000" {
		t.Fatalf("the job read %q bytes of its Stdin reader, want 100000", out.Data)
	}
}

func testJobWait(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	j, err := b.sb.Commands.Start(b.ctx(), sandbox.Command{Shell: "sleep 0.2; echo done; exit 3"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := j.Wait(b.ctx())
	if err != nil || st.Running || st.ExitCode != 3 || st.Ended.Before(st.Started) {
		t.Fatalf("Wait: %+v %v", st, err)
	}
	out, _ := j.Output(b.ctx(), 0)
	if out.Data != "done\n" || out.Status.Running {
		t.Fatalf("Output after Wait: %+v", out)
	}
}

func testJobKill(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	j, err := b.sb.Commands.Start(b.ctx(), sandbox.Command{Shell: `trap "" TERM; ` + b.sleep() + ` & ` + b.sleep() + `; ` + b.sleep()})
	if err != nil {
		t.Fatal(err)
	}
	waitMarked(t, b.marker, 3)
	if err := j.Kill(b.ctx()); err != nil {
		t.Fatal(err)
	}
	st, err := j.Wait(b.ctx())
	if err != nil || st.Running || st.Signal != "SIGKILL" {
		t.Fatalf("Wait after Kill of a job ignoring SIGTERM: %+v %v", st, err)
	}
	expectNoSurvivors(t, b.marker, "Job.Kill")
	// Killing an ended job is harmless.
	if err := j.Kill(b.ctx()); err != nil {
		t.Fatalf("Kill of an ended job: %v", err)
	}
}

func testJobTimeout(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	j, err := b.sb.Commands.Start(b.ctx(), sandbox.Command{Args: []string{"sleep", b.marker}, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	st, err := j.Wait(b.ctx())
	if err != nil || st.Running || st.Signal == "" {
		t.Fatalf("Wait for a job past its timeout: %+v %v", st, err)
	}
	expectNoSurvivors(t, b.marker, "the job's timeout")
}

func testJobList(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	ended, err := b.sb.Commands.Start(b.ctx(), sandbox.Command{Args: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ended.Wait(b.ctx()); err != nil {
		t.Fatal(err)
	}
	running, err := b.sb.Commands.Start(b.ctx(), sandbox.Command{Args: []string{"sleep", b.marker}})
	if err != nil {
		t.Fatal(err)
	}
	list, err := b.sb.Commands.Jobs(b.ctx())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != ended.ID || list[1].ID != running.ID {
		t.Fatalf("Jobs = %+v, want [%s %s] oldest first", list, ended.ID, running.ID)
	}
	if list[0].Running || !list[1].Running || list[1].Args[1] != b.marker {
		t.Fatalf("Jobs states: %+v", list)
	}
	// A handle made from an id (as a model passes it back) works.
	if st, err := b.sb.Commands.Job(running.ID).Status(b.ctx()); err != nil || !st.Running {
		t.Fatalf("Job(id).Status: %+v %v", st, err)
	}
}

func testJobRing(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	const n = 3 << 20
	j, err := b.sb.Commands.Start(b.ctx(), sandbox.Command{Shell: "head -c 3145728 /dev/zero | tr '\\0' x; echo END"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Wait(b.ctx()); err != nil {
		t.Fatal(err)
	}
	out, err := j.Output(b.ctx(), 0)
	if err != nil {
		t.Fatal(err)
	}
	written := int64(n + len("END\n"))
	if out.Status.Written != written {
		t.Fatalf("Written = %d, want %d", out.Status.Written, written)
	}
	kept := int64(len(out.Data))
	if kept == 0 || kept >= written || out.Dropped != written-kept || out.Next != written {
		t.Fatalf("read from 0: kept %d, Dropped %d, Next %d; want Dropped+kept = Written = %d", kept, out.Dropped, out.Next, written)
	}
	if !strings.HasSuffix(out.Data, "xxxxEND\n") {
		t.Fatalf("the ring does not end with the newest output: %q", out.Data[len(out.Data)-10:])
	}
	// A cursor inside the kept window drops nothing.
	tail, err := j.Output(b.ctx(), written-4)
	if err != nil || tail.Data != "END\n" || tail.Dropped != 0 {
		t.Fatalf("read of the last 4 bytes: %+v %v", tail, err)
	}
}

func testJobUnknown(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	j := b.sb.Commands.Job("job-does-not-exist")
	_, err := j.Status(b.ctx())
	wantCode(t, "Status", err, sandbox.CodeNotFound)
	_, err = j.Output(b.ctx(), 0)
	wantCode(t, "Output", err, sandbox.CodeNotFound)
	_, err = j.Wait(b.ctx())
	wantCode(t, "Wait", err, sandbox.CodeNotFound)
	wantCode(t, "Kill", j.Kill(b.ctx()), sandbox.CodeNotFound)
}

func testJobCloseKills(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	// A daemon in its own session, a double-forked one, and the job.
	_, err := b.sb.Commands.Start(b.ctx(), sandbox.Command{
		Shell: "setsid " + b.sleep() + " & (setsid sh -c '" + b.sleep() + " & " + b.sleep() + "' &) ; " + b.sleep(),
	})
	if err != nil {
		t.Fatal(err)
	}
	// A one-shot command can leave a daemon too.
	b.run(sandbox.Command{Shell: "setsid " + b.sleep() + " >/dev/null 2>&1 &"})
	waitMarked(t, b.marker, 5)
	// open's cleanup closes the sandbox and checks that none survived.
}

// testJobKillDaemons: Job.Kill (stop_background) ends every process the
// job started, also daemons re-parented away from its tree (they ran on
// until Close before).
func testJobKillDaemons(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	j, err := b.sb.Commands.Start(b.ctx(), sandbox.Command{Shell: b.daemons() + b.sleep()})
	if err != nil {
		t.Fatal(err)
	}
	waitMarked(t, b.marker, 5)
	if err := j.Kill(b.ctx()); err != nil {
		t.Fatal(err)
	}
	if st, err := j.Wait(b.ctx()); err != nil || st.Running {
		t.Fatalf("Wait after Kill: %+v %v", st, err)
	}
	expectNoSurvivors(t, b.marker, "Job.Kill (before Close)")
	b.usable()
}

// testJobKillAfterExit: a job whose main process ended but left daemons
// behind is still theirs to stop.
func testJobKillAfterExit(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	j, err := b.sb.Commands.Start(b.ctx(), sandbox.Command{Shell: b.daemons() + "echo main-done"})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := j.Wait(b.ctx()); err != nil || st.ExitCode != 0 {
		t.Fatalf("Wait: %+v %v", st, err)
	}
	waitMarked(t, b.marker, 3)
	if err := j.Kill(b.ctx()); err != nil {
		t.Fatal(err)
	}
	expectNoSurvivors(t, b.marker, "Job.Kill of an ended job with daemons (before Close)")
}

// testJobTimeoutDaemons: a job's timeout reaches its daemons too.
func testJobTimeoutDaemons(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	j, err := b.sb.Commands.Start(b.ctx(), sandbox.Command{Shell: b.daemons() + b.sleep(), Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := j.Wait(b.ctx()); err != nil || st.Signal == "" {
		t.Fatalf("Wait for a job past its timeout: %+v %v", st, err)
	}
	expectNoSurvivors(t, b.marker, "the job's timeout (before Close)")
}
