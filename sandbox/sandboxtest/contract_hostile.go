package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

var limitTests = []contractTest{
	{name: "FileSizeLimitIsAQuotaError", run: testFileSizeQuota},
	{name: "DiskQuotaIsAQuotaError", run: testDiskQuota},
	{name: "OpenFilesLimitStopsTheNextOpen", run: testOpenFiles},
}

// testOpenFiles sets Limits.OpenFiles: a command sees it as its
// RLIMIT_NOFILE, a program opening file after file gets EMFILE ("Too many
// open files") before it holds that many, Info reports the control with
// the rlimit as data, and the sandbox stays usable.
func testOpenFiles(t *testing.T, newSandbox Factory) {
	const limit = 100
	b := open(t, newSandbox, sandbox.WithLimits(sandbox.Limits{OpenFiles: limit}))
	var ctl sandbox.Control
	for _, c := range b.sb.Info().Controls {
		if c.Name == "open_files" {
			ctl = c
		}
	}
	if !ctl.Enforced || ctl.Rlimit != "RLIMIT_NOFILE" || !strings.Contains(ctl.Mechanism, "RLIMIT_NOFILE") {
		t.Errorf("Info reports open_files as %+v; want it enforced by RLIMIT_NOFILE, in data and in words", ctl)
	}
	// Args, not a shell script: the process the agent started is the one
	// whose limit is read.
	if got := b.run(sandbox.Command{Args: []string{"sh", "-c", "ulimit -n"}}).Stdout; strings.TrimSpace(got) != strconv.Itoa(limit) {
		t.Errorf("ulimit -n in the sandbox = %q, want %d", got, limit)
	}
	if !b.sb.Info().PythonAvailable {
		Unavailable(t, "python", "the sandbox has no python3 to open files with")
	}
	res, err := b.sb.Commands.Run(b.ctx(), sandbox.Command{Args: []string{"python3", "-c", `
import os
fds = []
try:
    for i in range(10 * ` + strconv.Itoa(limit) + `):
        fds.append(os.open("/dev/null", os.O_RDONLY))
    print("opened", len(fds))
except OSError as e:
    print("stopped after", len(fds), "with", e.strerror)
`}})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var why string
	if _, err := fmt.Sscanf(res.Stdout, "stopped after %d with %s", &n, &why); err != nil || !strings.Contains(res.Stdout, "Too many open files") || n >= limit || n < limit/2 {
		t.Fatalf("opening files under Limits.OpenFiles=%d: %q %q; want EMFILE (Too many open files) after fewer than %d", limit, res.Stdout, res.Stderr, limit)
	}
	b.usable()
}

func testFileSizeQuota(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox, sandbox.WithLimits(sandbox.Limits{FileSizeBytes: 1000}))
	wantCode(t, "Write over the file size", b.sb.Files.Write(b.ctx(), "big", make([]byte, 1001), 0), sandbox.CodeQuota)
	if _, err := b.sb.Files.Stat(b.ctx(), "big"); sandbox.CodeOf(err) != sandbox.CodeNotFound {
		t.Fatalf("a refused write left a file behind: %v", err)
	}
	if err := b.sb.Files.Write(b.ctx(), "ok", make([]byte, 600), 0); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "Append past the file size", b.sb.Files.Append(b.ctx(), "ok", make([]byte, 600)), sandbox.CodeQuota)
	big := makeTar(t, []tarFile{{name: "huge.bin", body: strings.Repeat("x", 1500), mode: 0o644, typ: '0'}})
	wantCode(t, "CopyIn of a file over the size", b.sb.Files.CopyIn(b.ctx(), "in", big), sandbox.CodeQuota)
	// Commands are held to it too.
	res, err := b.sb.Commands.Run(b.ctx(), sandbox.Command{Shell: "head -c 5000 /dev/zero > cmd-big"})
	if err != nil || res.ExitCode == 0 {
		t.Fatalf("a command wrote past the file size limit: %+v %v", res, err)
	}
	b.usable()
}

func testDiskQuota(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox, sandbox.WithLimits(sandbox.Limits{DiskBytes: 10000}))
	for i := range 3 {
		if err := b.sb.Files.Write(b.ctx(), "f"+strconv.Itoa(i), make([]byte, 3000), 0); err != nil {
			t.Fatalf("write %d within the quota: %v", i, err)
		}
	}
	wantCode(t, "Write past the quota", b.sb.Files.Write(b.ctx(), "f3", make([]byte, 3000), 0), sandbox.CodeQuota)
	// Replacing a file counts its new size, not both; but where the quota
	// is a file system of that size, the new content is written beside
	// the old before it replaces it: then a replacement that does not fit
	// beside fails, and leaves the old file as it was.
	if err := b.sb.Files.Write(b.ctx(), "f0", make([]byte, 3500), 0); err != nil {
		wantCode(t, "rewriting within the quota, with no room beside the old file", err, sandbox.CodeQuota)
		wantMessage(t, "rewriting within the quota, with no room beside the old file", err, "unchanged", "Limits.DiskBytes")
		if got := b.read("f0"); len(got) != 3000 {
			t.Fatalf("a failed rewrite left %d bytes in f0, want its old 3000", len(got))
		}
	}
	tr := makeTar(t, []tarFile{{name: "a", body: strings.Repeat("x", 900), mode: 0o644, typ: '0'}, {name: "b", body: strings.Repeat("x", 900), mode: 0o644, typ: '0'}})
	wantCode(t, "CopyIn past the quota", b.sb.Files.CopyIn(b.ctx(), "in", tr), sandbox.CodeQuota)
	if err := b.sb.Files.Remove(b.ctx(), "f1", sandbox.RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.sb.Files.Write(b.ctx(), "f3", make([]byte, 2000), 0); err != nil {
		t.Fatalf("writing after freeing space: %v", err)
	}
	if err := b.sb.Files.Remove(b.ctx(), "f3", sandbox.RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.sb.Files.Write(b.ctx(), "f0", make([]byte, 3500), 0); err != nil {
		t.Fatalf("rewriting with room beside the old file: %v", err)
	}
}

var hostileTests = []contractTest{
	{name: "DotDotPathIsRefused", run: testDotDot},
	{name: "AbsolutePathOutsideIsRefused", run: testAbsoluteOutside},
	{name: "SymlinkToEtcIsNotFollowed", run: testSymlinkOut},
	{name: "SymlinkSwappedDuringReadsNeverLeaks", run: testSymlinkRace},
	{name: "InvalidUTF8NamesAreRefusedOrSurvived", run: testInvalidUTF8},
	{name: "TarEntriesCannotEscape", run: testTarEscape},
	{name: "EndlessOutputIsBoundedAndCut", run: testYesShort},
	{name: "ForkedFloodIsKilledAtTimeout", run: testForkFlood},
}

// outsideRefused checks every file operation on an outside path.
func outsideRefused(t *testing.T, b *box, p string) {
	t.Helper()
	ctx := b.ctx()
	fsys := b.sb.Files
	_, err := fsys.ReadFile(ctx, p)
	wantCode(t, "Read "+p, err, sandbox.CodePathEscape)
	wantCode(t, "Write "+p, fsys.Write(ctx, p, []byte("pwned"), 0), sandbox.CodePathEscape)
	wantCode(t, "Append "+p, fsys.Append(ctx, p, []byte("pwned")), sandbox.CodePathEscape)
	_, err = fsys.Edit(ctx, p, "root", "toor", sandbox.EditOptions{})
	wantCode(t, "Edit "+p, err, sandbox.CodePathEscape)
	_, err = fsys.List(ctx, p, sandbox.ListOptions{})
	wantCode(t, "List "+p, err, sandbox.CodePathEscape)
	_, err = fsys.Search(ctx, sandbox.SearchOptions{Pattern: "root", Path: p})
	wantCode(t, "Search "+p, err, sandbox.CodePathEscape)
	wantCode(t, "Copy from "+p, fsys.Copy(ctx, p, "stolen", sandbox.CopyOptions{}), sandbox.CodePathEscape)
	wantCode(t, "CopyOut "+p, fsys.CopyOut(ctx, p, discard{}), sandbox.CodePathEscape)
	wantCode(t, "Chmod "+p, fsys.Chmod(ctx, p, 0o777), sandbox.CodePathEscape)
	_, err = b.sb.Commands.Run(ctx, sandbox.Command{Args: []string{"true"}, Dir: filepath.Dir(p)})
	if filepath.Dir(p) != "." {
		wantCode(t, "command Dir "+filepath.Dir(p), err, sandbox.CodePathEscape)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func testDotDot(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	for _, p := range []string{"../../etc/passwd", "sub/../../etc/passwd", ".."} {
		_, err := b.sb.Files.ReadFile(b.ctx(), p)
		wantCode(t, "Read "+p, err, sandbox.CodePathEscape)
	}
	outsideRefused(t, b, "../../etc/passwd")
	wantCode(t, "Move out", b.sb.Files.Move(b.ctx(), "x", "../../tmp/x", sandbox.MoveOptions{Overwrite: true}), sandbox.CodePathEscape)
	b.usable()
}

func testAbsoluteOutside(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	outsideRefused(t, b, "/etc/passwd")
	ws := b.sb.Info().Workspace
	_, err := b.sb.Files.ReadFile(b.ctx(), ws+"-sibling/x")
	wantCode(t, "a sibling sharing the workspace's prefix", err, sandbox.CodePathEscape)
	b.usable()
}

func testSymlinkOut(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	// An outside directory the test owns, to see whether a write leaked.
	outside := t.TempDir()
	// Links made by a command, as user code would.
	b.run(sandbox.Command{Shell: `ln -s /etc etclink; ln -s /etc/passwd pw; ln -s ../../../../../../../etc up; ln -s ` + outside + ` out; mkdir -p d; ln -s ../../../../../../../../etc d/deep`})
	for _, p := range []string{"etclink/passwd", "pw", "up/passwd", "d/deep/passwd"} {
		outsideRefused(t, b, p)
	}
	for _, p := range []string{"out/planted", "etclink/sandboxkit-planted-" + b.marker} {
		wantCode(t, "Write through a link "+p, b.sb.Files.Write(b.ctx(), p, []byte("planted"), 0), sandbox.CodePathEscape)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("a write through a symlink reached the outside directory: %v", ents)
	}
	if _, err := os.Stat("/etc/sandboxkit-planted-" + b.marker); err == nil {
		os.Remove("/etc/sandboxkit-planted-" + b.marker)
		t.Fatal("a write through a symlink created a file in /etc")
	}
	// Search and CopyOut of the workspace do not follow the links out.
	r, err := b.sb.Files.Search(b.ctx(), sandbox.SearchOptions{Pattern: "root:"})
	if err != nil || len(r.Matches) != 0 {
		t.Fatalf("Search of the workspace followed a link out: %+v %v", r, err)
	}
	var tb strings.Builder
	if err := b.sb.Files.CopyOut(b.ctx(), "", &tb); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(tb.String(), "root:") {
		t.Fatal("CopyOut of the workspace followed a link out")
	}
	// The links themselves are visible as links.
	if e, err := b.sb.Files.Stat(b.ctx(), "etclink"); err != nil || e.Type != "symlink" || e.Target != "/etc" {
		t.Fatalf("Stat(etclink): %+v %v", e, err)
	}
	// A link that stays inside keeps working.
	b.write("real.txt", "inside")
	b.run(sandbox.Command{Args: []string{"ln", "-s", "real.txt", "inlink"}})
	if b.read("inlink") != "inside" {
		t.Fatal("a symlink inside the workspace no longer works")
	}
	b.usable()
}

// testSymlinkRace swaps a path component between a directory inside the
// workspace and links leading out while files are read and written through
// it. It cannot pass vacuously: first each state of the link is set between
// reads and checked (inside content, or a refusal), then the swap runs as a
// concurrent job, and the reads go on until both outcomes have been seen
// while the job demonstrably kept swapping (its cycle counter advances
// between batches of reads), or the test fails after a generous bound.
func testSymlinkRace(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("outside-secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	b.write("real/secret", "inside-secret")
	var inside, refused int
	readThrough := func(p string) {
		t.Helper()
		data, err := b.sb.Files.ReadFile(b.ctx(), p)
		switch code := sandbox.CodeOf(err); {
		case err == nil && string(data) == "inside-secret":
			inside++
		case err == nil:
			t.Fatalf("read %q through a swapped link returned outside content %q", p, data)
		case code == sandbox.CodePathEscape || code == sandbox.CodeNotFound:
			refused++
		default:
			t.Fatalf("read %q during the race: %v", p, err)
		}
		err = b.sb.Files.Write(b.ctx(), "m/planted", []byte("x"), 0)
		if err != nil && sandbox.CodeOf(err) == "" {
			t.Fatalf("write during the race: %v", err)
		}
	}
	// Deterministic: every state the swap goes through, each read between
	// two swaps.
	for _, target := range []string{outside, "real", "/etc", "real"} {
		b.run(sandbox.Command{Args: []string{"ln", "-sfn", target, "m"}})
		in, ref := inside, refused
		readThrough("m/secret")
		readThrough("m/passwd")
		if target == "real" && inside != in+1 {
			t.Fatalf("m -> real: m/secret did not read the inside file")
		}
		if target != "real" && refused != ref+2 {
			t.Fatalf("m -> %s: reads through the link were not refused", target)
		}
	}
	// Concurrent: a job swaps "m" as fast as it can and counts its cycles.
	j, err := b.sb.Commands.Start(b.ctx(), sandbox.Command{Shell: `i=0; while :; do
  ln -sfn ` + outside + ` m.tmp && mv -T m.tmp m
  ln -sfn real m.tmp && mv -T m.tmp m
  ln -sfn /etc m.tmp && mv -T m.tmp m
  i=$((i+1)); echo $i > cycles.tmp && mv cycles.tmp cycles
done # ` + b.marker})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Kill(context.Background())
	cycles := func() string {
		data, _ := b.sb.Files.ReadFile(b.ctx(), "cycles")
		return string(data)
	}
	inside, refused = 0, 0
	const minReads, perCycle = 200, 8
	deadline := time.Now().Add(45 * time.Second)
	last, advances := "", 0
	for reads := 0; reads < minReads || inside == 0 || refused == 0 || advances < 3; reads += 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the swap job never interleaved with the reads within 45s: %d reads inside, %d refused, %d swap cycles seen advancing", inside, refused, advances)
		}
		readThrough("m/secret")
		readThrough("m/passwd")
		if reads%perCycle == 0 {
			// Wait for the swapper to move on, so that the reads land at
			// different points of its cycle even when it is starved of CPU.
			c := cycles()
			for c == last {
				if time.Now().After(deadline) {
					t.Fatalf("the swap job stopped cycling (last cycle %q)", last)
				}
				time.Sleep(time.Millisecond)
				c = cycles()
			}
			last = c
			advances++
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "planted")); err == nil {
		t.Fatal("a write through the swapped link reached the outside directory")
	}
	if _, err := os.Stat("/etc/planted"); err == nil {
		os.Remove("/etc/planted")
		t.Fatal("a write through the swapped link reached /etc")
	}
	t.Logf("during the race: %d reads inside, %d refused, %d swap cycles", inside, refused, advances)
	if err := j.Kill(b.ctx()); err != nil {
		t.Fatal(err)
	}
	b.usable()
}

func testInvalidUTF8(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	bad := "bad\xff\xfename.txt"
	wantCode(t, "Write of an invalid UTF-8 name", b.sb.Files.Write(b.ctx(), bad, []byte("x"), 0), sandbox.CodeInvalidArgument)
	_, err := b.sb.Files.ReadFile(b.ctx(), bad)
	wantCode(t, "Read of an invalid UTF-8 name", err, sandbox.CodeInvalidArgument)
	_, err = b.sb.Commands.Run(b.ctx(), sandbox.Command{Args: []string{"touch", bad}})
	wantCode(t, "argv with invalid UTF-8", err, sandbox.CodeInvalidArgument)
	// A command can still make such a name; listing, searching and
	// copying the workspace must survive it.
	b.run(sandbox.Command{Shell: `printf 'needle\n' > "$(printf 'made\377by\376sh')"`})
	l, err := b.sb.Files.List(b.ctx(), "", sandbox.ListOptions{})
	if err != nil || len(l.Entries) != 1 {
		t.Fatalf("List with an invalid UTF-8 name: %+v %v", l, err)
	}
	if _, err := b.sb.Files.Search(b.ctx(), sandbox.SearchOptions{Pattern: "needle"}); err != nil {
		t.Fatalf("Search with an invalid UTF-8 name: %v", err)
	}
	if err := b.sb.Files.CopyOut(b.ctx(), "", discard{}); err != nil {
		t.Fatalf("CopyOut with an invalid UTF-8 name: %v", err)
	}
	b.usable()
}

func testTarEscape(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	outside := t.TempDir()
	for _, tc := range []struct {
		name  string
		files []tarFile
	}{
		{"dot-dot entry", []tarFile{{name: "../../escaped", body: "x", mode: 0o644, typ: '0'}}},
		{"absolute entry", []tarFile{{name: outside + "/escaped", body: "x", mode: 0o644, typ: '0'}}},
		{"symlink then write through it", []tarFile{
			{name: "lnk", link: outside, mode: 0o777, typ: '2'},
			{name: "lnk/escaped", body: "x", mode: 0o644, typ: '0'},
		}},
		{"hard link to an outside file", []tarFile{{name: "hl", link: "../../../../etc/passwd", mode: 0o644, typ: '1'}}},
	} {
		err := b.sb.Files.CopyIn(b.ctx(), "in", makeTar(t, tc.files))
		wantCode(t, tc.name, err, sandbox.CodePathEscape)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("CopyIn wrote outside the workspace: %v", ents)
	}
	b.usable()
}

// agentMemory returns the agent's peak resident memory in bytes, or -1.
func agentMemory(pid int) int64 {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return -1
}

// RunEndlessOutput runs `yes` in sb for d and checks that the output is
// cut with a marker, that memory stays bounded on both sides, and that the
// sandbox is usable afterwards. The contract runs it for 2 s; a backend's
// own tests can run the full 10 s of the hostile-input list.
func RunEndlessOutput(t *testing.T, newSandbox Factory, d time.Duration) {
	const limit = 256 << 10
	b := open(t, newSandbox, sandbox.WithLimits(sandbox.Limits{MaxOutputBytes: limit}))
	pid := b.agentPIDOrZero()
	before := agentMemory(pid)
	var streamed int64
	res, err := b.sb.Commands.Run(b.ctx(), sandbox.Command{
		Args:     []string{"yes", b.marker},
		Timeout:  d,
		OnOutput: func(c sandbox.Chunk) { streamed += int64(len(c.Data)) },
	})
	if !errors.Is(err, sandbox.ErrTimeout) || res == nil {
		t.Fatalf("yes for %s: %v", d, err)
	}
	if res.StdoutDropped < 10*limit {
		t.Fatalf("only %d bytes were dropped in %s of yes; was the output not consumed?", res.StdoutDropped, d)
	}
	if len(res.Stdout) > limit+200 || streamed > limit+200 {
		t.Fatalf("kept %d and streamed %d bytes of endless output, the cap is %d", len(res.Stdout), streamed, limit)
	}
	if !strings.HasPrefix(res.Stdout, b.marker+"\n") || !strings.Contains(res.Stdout, strconv.FormatInt(res.StdoutDropped, 10)+" bytes") {
		t.Fatal("the cut output lacks its head or the marker saying how much was dropped")
	}
	if pid > 0 {
		after := agentMemory(pid)
		// The race detector multiplies memory; the point is that gigabytes
		// of output do not show up here.
		if after-before > 200<<20 {
			t.Fatalf("the agent's peak memory grew by %d MiB while %d MiB of output were dropped", (after-before)>>20, res.StdoutDropped>>20)
		}
		t.Logf("%s of yes: %d MiB dropped; agent peak memory %d -> %d MiB", d, res.StdoutDropped>>20, before>>20, after>>20)
	}
	expectNoSurvivors(t, b.marker, "the timeout of yes")
	b.usable()
}

func (b *box) agentPIDOrZero() int {
	pid, _ := strconv.Atoi(b.sb.Info().Extra["agent_pid"])
	return pid
}

func testYesShort(t *testing.T, newSandbox Factory) {
	RunEndlessOutput(t, newSandbox, 2*time.Second)
}

func testForkFlood(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	// Many short-lived children, some leaving the group, while the tree is
	// killed at the deadline.
	_, err := b.sb.Commands.Run(b.ctx(), sandbox.Command{
		Shell:   `i=0; while [ $i -lt 40 ]; do setsid sh -c '` + b.sleep() + `' & i=$((i+1)); done; ` + b.sleep(),
		Timeout: 500 * time.Millisecond,
	})
	if !errors.Is(err, sandbox.ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	expectNoSurvivors(t, b.marker, "the timeout of a process flood")
	b.usable()
}

var lifecycleTests = []contractTest{
	{name: "RequestAfterCloseIsClosed", run: testAfterClose},
	{name: "CloseRemovesTempWorkspaceKeepsCallers", run: testWorkspaceCleanup},
	{name: "AgentDeathFailsEveryCallWithDead", run: testAgentDeath},
	{name: "InfoReportsTheSandbox", run: testInfo},
	{name: "CancelledContextKillsTheCommand", run: testCancel},
	{name: "TTLExpiryClosesAndKillsEverything", run: testTTL},
	{name: "PauseFreezesEveryProcessResumeContinues", run: testPause},
}

// testTTL forgets a sandbox with a short TTL: when it fires, the sandbox
// is closed and no process of it survives.
func testTTL(t *testing.T, newSandbox Factory) {
	const ttl = 2 * time.Second
	b := open(t, newSandbox, sandbox.WithTTL(ttl))
	if _, err := b.sb.Commands.Start(b.ctx(), sandbox.Command{Shell: b.sleep() + " & setsid " + b.sleep() + " & " + b.sleep()}); err != nil {
		t.Fatal(err)
	}
	waitMarked(t, b.marker, 3)
	eventually(t, "the TTL closes the sandbox", ttl+20*time.Second, func() bool { return b.sb.Info().Closed })
	expectNoSurvivors(t, b.marker, "the TTL firing")
	_, err := b.sb.Commands.Run(b.ctx(), sandbox.Command{Args: []string{"true"}})
	wantCode(t, "Run after the TTL fired", err, sandbox.CodeClosed)
	wantCode(t, "Renew after the TTL fired", b.sb.Renew(b.ctx()), sandbox.CodeClosed)
}

// testPause freezes a sandbox whose job stamps the time every 10 ms: no
// stamp may fall between the end of Pause and the start of Resume, calls
// made meanwhile fail with SBX_PAUSED, and the stamps go on after Resume.
func testPause(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	if _, err := b.sb.Commands.Start(b.ctx(), sandbox.Command{Shell: `while :; do date +%s%N >> ticks; sleep 0.01; done # ` + b.marker}); err != nil {
		t.Fatal(err)
	}
	ticks := func() []int64 {
		data, _ := b.sb.Files.ReadFile(b.ctx(), "ticks")
		var out []int64
		for _, f := range strings.Fields(string(data)) {
			if n, err := strconv.ParseInt(f, 10, 64); err == nil {
				out = append(out, n)
			}
		}
		return out
	}
	eventually(t, "the job stamps the time", 20*time.Second, func() bool { return len(ticks()) >= 3 })
	if err := b.sb.Pause(b.ctx()); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	paused := time.Now().UnixNano()
	if !b.sb.Info().Paused {
		t.Error("Info().Paused is false after Pause")
	}
	_, err := b.sb.Commands.Run(b.ctx(), sandbox.Command{Args: []string{"true"}})
	wantCode(t, "Run while paused", err, sandbox.CodePaused)
	_, err = b.sb.Files.ReadFile(b.ctx(), "ticks")
	wantCode(t, "ReadFile while paused", err, sandbox.CodePaused)
	time.Sleep(500 * time.Millisecond)
	resumed := time.Now().UnixNano()
	if err := b.sb.Resume(b.ctx()); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	var after int
	eventually(t, "stamps go on after Resume", 20*time.Second, func() bool {
		after = 0
		for _, n := range ticks() {
			if n > paused && n < resumed {
				t.Fatalf("a process ran while the sandbox was paused: stamp %d is %v after Pause returned", n, time.Duration(n-paused))
			}
			if n >= resumed {
				after++
			}
		}
		return after >= 3
	})
	b.usable()
}

func testAfterClose(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	j, err := b.sb.Commands.Start(b.ctx(), sandbox.Command{Args: []string{"sleep", b.marker}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.sb.Close(); err != nil {
		t.Fatal(err)
	}
	expectNoSurvivors(t, b.marker, "Close")
	ctx := b.ctx()
	calls := map[string]func() error{
		"Run":   func() error { _, err := b.sb.Commands.Run(ctx, sandbox.Command{Args: []string{"true"}}); return err },
		"Start": func() error { _, err := b.sb.Commands.Start(ctx, sandbox.Command{Args: []string{"true"}}); return err },
		"Jobs":  func() error { _, err := b.sb.Commands.Jobs(ctx); return err },
		"Job.Output": func() error {
			_, err := j.Output(ctx, 0)
			return err
		},
		"Job.Wait": func() error { _, err := j.Wait(ctx); return err },
		"Job.Kill": func() error { return j.Kill(ctx) },
		"Read":     func() error { _, err := b.sb.Files.ReadFile(ctx, "x"); return err },
		"Write":    func() error { return b.sb.Files.Write(ctx, "x", nil, 0) },
		"Search": func() error {
			_, err := b.sb.Files.Search(ctx, sandbox.SearchOptions{Pattern: "x"})
			return err
		},
		"CopyIn":  func() error { return b.sb.Files.CopyIn(ctx, "", strings.NewReader("")) },
		"CopyOut": func() error { return b.sb.Files.CopyOut(ctx, "", discard{}) },
		"Renew":   func() error { return b.sb.Renew(b.ctx()) },
	}
	for name, call := range calls {
		err := call()
		wantCode(t, name+" after Close", err, sandbox.CodeClosed)
		var se *sandbox.Error
		if !errors.As(err, &se) || !se.Fatal() {
			t.Errorf("%s after Close: the error is not marked fatal", name)
		}
	}
	if err := b.sb.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
	if !b.sb.Info().Closed {
		t.Fatal("Info does not report the sandbox closed")
	}
}

func testWorkspaceCleanup(t *testing.T, newSandbox Factory) {
	temp := open(t, newSandbox)
	host := temp.sb.Info().HostWorkspace
	if host == "" {
		t.Skip("the backend's workspace is not reachable from the host")
	}
	temp.write("x", "y")
	if err := temp.sb.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(host); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Close left the temporary workspace %s behind (%v)", host, err)
	}
	// Not t.TempDir: its 0700 parent would keep a sandbox that runs as
	// another uid (as isolating tiers do under root) from reaching it.
	mine, err := os.MkdirTemp("", "sandboxkit-contract-kept-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(mine) })
	kept := open(t, newSandbox, sandbox.WithWorkspace(mine))
	kept.write("result.txt", "keep me")
	if err := kept.sb.Close(); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(mine, "result.txt")); err != nil || string(data) != "keep me" {
		t.Fatalf("Close removed the caller's workspace or its files: %q %v", data, err)
	}
}

func testAgentDeath(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	pid := b.agentPID()
	j, err := b.sb.Commands.Start(b.ctx(), sandbox.Command{Args: []string{"sleep", b.marker}})
	if err != nil {
		t.Fatal(err)
	}
	// Calls pending when the agent dies.
	errs := make(chan error, 2)
	var started sync.WaitGroup
	started.Add(2)
	go func() {
		started.Done()
		_, err := b.sb.Commands.Run(b.ctx(), sandbox.Command{Args: []string{"sleep", b.marker}})
		errs <- err
	}()
	go func() {
		started.Done()
		_, err := j.Wait(b.ctx())
		errs <- err
	}()
	started.Wait()
	waitMarked(t, b.marker, 2)
	if err := killPID(pid); err != nil {
		t.Fatalf("killing the agent (pid %d): %v", pid, err)
	}
	for range 2 {
		select {
		case err := <-errs:
			wantCode(t, "a call pending when the agent died", err, sandbox.CodeDead)
		case <-time.After(10 * time.Second):
			t.Fatal("a call pending when the agent died hangs")
		}
	}
	_, err = b.sb.Files.ReadFile(b.ctx(), "x")
	wantCode(t, "a call after the agent died", err, sandbox.CodeDead)
	_, err = b.sb.Commands.Run(b.ctx(), sandbox.Command{Args: []string{"true"}})
	wantCode(t, "a command after the agent died", err, sandbox.CodeDead)
	// open's cleanup checks that Close returns and that nothing survived.
}

func testInfo(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	info := b.sb.Info()
	if info.ID == "" || info.ID != b.sb.ID() || info.Backend == "" || info.Workspace == "" || info.Closed {
		t.Fatalf("Info: %+v", info)
	}
	if info.Limits.Timeout != sandbox.DefaultLimits.Timeout || info.Limits.MaxOutputBytes != sandbox.DefaultLimits.MaxOutputBytes {
		t.Fatalf("Info limits %+v, want the defaults", info.Limits)
	}
	names := map[string]bool{}
	for _, c := range info.Controls {
		if c.Mechanism == "" {
			t.Errorf("control %q does not say how it is enforced", c.Name)
		}
		names[c.Name] = true
	}
	for _, want := range []string{"network", "filesystem", "environment", "timeout"} {
		if !names[want] {
			t.Errorf("Info does not report the %q control", want)
		}
	}
	res := b.run(sandbox.Command{Args: []string{"pwd"}})
	if strings.TrimSpace(res.Stdout) != info.Workspace {
		t.Fatalf("commands start in %q, Info says the workspace is %q", res.Stdout, info.Workspace)
	}
	_, err := os.Stat("/usr/bin/python3")
	if hasPy := b.run(sandbox.Command{Shell: "command -v python3 || true"}).Stdout != ""; hasPy != info.PythonAvailable {
		t.Fatalf("PythonAvailable = %v but python3 on PATH is %v (%v)", info.PythonAvailable, hasPy, err)
	}
	before := info.Expires
	time.Sleep(5 * time.Millisecond)
	if err := b.sb.Renew(b.ctx()); err != nil || !b.sb.Info().Expires.After(before) {
		t.Fatalf("Renew did not push the TTL back: %v", err)
	}
}

func testCancel(t *testing.T, newSandbox Factory) {
	b := open(t, newSandbox)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := b.sb.Commands.Run(ctx, sandbox.Command{Shell: `trap "" TERM; ` + b.sleep() + `; ` + b.sleep()})
		done <- err
	}()
	waitMarked(t, b.marker, 2)
	cancel()
	select {
	case err := <-done:
		wantCode(t, "Run with a cancelled context", err, sandbox.CodeCanceled)
	case <-time.After(10 * time.Second):
		t.Fatal("Run does not return when its context is cancelled")
	}
	expectNoSurvivors(t, b.marker, "cancelling the command")
	b.usable()
}
