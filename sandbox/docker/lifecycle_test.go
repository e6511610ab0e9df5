package docker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox/agent"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// codeOf returns the driver error code of err, "" when it has none.
func codeOf(err error) driver.Code {
	var de *driver.Error
	if errors.As(err, &de) {
		return de.Code
	}
	return ""
}

func waitDone(t *testing.T, c *Container, within time.Duration) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(within):
		t.Fatalf("container still running %s later", within)
	}
}

func waitGone(t *testing.T, d *Driver, id string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !inspectGone(t, d, id) {
		if time.Now().After(deadline) {
			t.Fatalf("container %s still exists on the engine", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCloseRemovesTheContainer(t *testing.T) {
	d := newTestDriver(t)
	s := start(t, d, driver.Config{ID: "close-" + randID()})
	if err := s.c.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !inspectGone(t, d, s.c.ID()) {
		t.Error("container still exists after Close")
	}
	waitDone(t, s.c, time.Second)
	if err := s.c.Err(); err != nil {
		t.Errorf("Err after Close = %v, want nil", err)
	}
	if err := s.c.Close(context.Background()); err != nil {
		t.Errorf("second Close: %v, want nil (idempotent)", err)
	}
	if err := s.c.Pause(context.Background()); codeOf(err) != driver.CodeDead {
		t.Errorf("Pause after Close = %v, want code %s", err, driver.CodeDead)
	}
}

func TestAgentVolumeIsSharedAndRefilledAfterGC(t *testing.T) {
	needEngine(t)
	// An agent binary of this test's own (the standard one with bytes
	// appended, which an ELF loader ignores), so that its volume is used by
	// nobody else: with the shared one, a sandbox of another package's
	// tests running at the same time keeps the volume in use and GC rightly
	// leaves it (seen in CI once more packages ran Docker at once).
	bin := uniqueAgentBinary(t)
	d := newTestDriver(t, WithAgentBinary(bin))
	dropAgentVolume(t, d, bin)
	a := start(t, d, driver.Config{ID: "vol-" + randID()})
	b := start(t, d, driver.Config{ID: "vol-" + randID()})
	vol := func(s *started) string {
		ins, err := d.cli.ContainerInspect(context.Background(), s.c.ID())
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ins.Mounts {
			if m.Destination == agentDir {
				if m.RW {
					t.Errorf("agent volume %s is mounted read-write", m.Name)
				}
				return m.Name
			}
		}
		t.Fatalf("no agent mount in %+v", ins.Mounts)
		return ""
	}
	va, vb := vol(a), vol(b)
	if va != vb || !strings.HasPrefix(va, "sandboxkit-agent-") {
		t.Fatalf("agent volumes %q and %q, want one shared sandboxkit-agent-* volume", va, vb)
	}
	a.c.Close(testCtx(t))
	b.c.Close(testCtx(t))
	// An owner with no containers: only the unused agent volume goes, and
	// other processes' sandboxes on this engine are left alone.
	if _, err := GC(testCtx(t), GCOptions{Owner: "nobody-" + randID()}); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if _, err := d.cli.VolumeInspect(context.Background(), va); err == nil {
		t.Fatalf("GC left the unused agent volume %s", va)
	}
	// The driver still believes the volume is filled; Start must recover.
	c := start(t, d, driver.Config{ID: "vol-" + randID()})
	if _, code := c.run(t, "true"); code != 0 {
		t.Fatal("sandbox after GC of the agent volume does not work")
	}
}

func TestClosingTheStreamEndsTheAgentAndTheContainer(t *testing.T) {
	// A crashed host closes its end of the attach stream; nothing may keep
	// running afterwards.
	d := newTestDriver(t)
	s := start(t, d, driver.Config{ID: "stream-" + randID()})
	if _, code := s.run(t, "true"); code != 0 {
		t.Fatal("sandbox not working")
	}
	s.cl.Close()
	waitDone(t, s.c, 10*time.Second)
	waitGone(t, d, s.c.ID())
	if err := s.c.Err(); codeOf(err) != driver.CodeDead {
		t.Errorf("Err = %v, want code %s", err, driver.CodeDead)
	}
}

func TestKilledContainerIsReportedDead(t *testing.T) {
	d := newTestDriver(t)
	s := start(t, d, driver.Config{ID: "kill-" + randID()})
	if err := d.cli.ContainerKill(context.Background(), s.c.ID(), "KILL"); err != nil {
		t.Fatal(err)
	}
	waitDone(t, s.c, 10*time.Second)
	err := s.c.Err()
	if codeOf(err) != driver.CodeDead || !strings.Contains(err.Error(), "killed through the Docker engine (signal 9") {
		t.Errorf("Err = %v, want code %s saying the engine killed it with signal 9", err, driver.CodeDead)
	}
	if err := s.c.Resume(context.Background()); codeOf(err) != driver.CodeDead {
		t.Errorf("Resume of a dead container = %v, want code %s", err, driver.CodeDead)
	}
}

func TestPausedSandboxMakesNoProgressUntilResumed(t *testing.T) {
	d := newTestDriver(t)
	s := start(t, d, driver.Config{ID: "pause-" + randID()})
	ctx := testCtx(t)
	if err := s.c.Pause(ctx); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	result := make(chan error, 1)
	go func() {
		_, _, err := s.exec(ctx, "true")
		result <- err
	}()
	select {
	case err := <-result:
		t.Fatalf("a command finished while paused (err %v)", err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := s.c.Resume(ctx); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	select {
	case err := <-result:
		if err != nil {
			t.Fatalf("command after resume: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("command did not finish after Resume")
	}
}

func TestClosingAPausedSandboxRemovesIt(t *testing.T) {
	d := newTestDriver(t)
	s := start(t, d, driver.Config{ID: "pauseclose-" + randID()})
	if err := s.c.Pause(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := s.c.Close(testCtx(t)); err != nil {
		t.Fatalf("Close of a paused sandbox: %v", err)
	}
	if !inspectGone(t, d, s.c.ID()) {
		t.Error("paused container still exists after Close")
	}
}

// goneIdentity returns the identity of a process of this machine that ran
// and is gone: what a program killed with SIGKILL leaves on its containers.
func goneIdentity(t *testing.T) identity {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	id := identify(cmd.Process.Pid)
	cmd.Process.Kill()
	cmd.Wait()
	if id.start == "" || procStart(id.pid) != "" {
		t.Fatalf("could not record a gone process: %+v", id)
	}
	return id
}

// Two programs share an engine, each with its own owner, and each has
// live sandboxes and leftovers of a killed predecessor. GC by owner removes
// only that owner's leftovers; the live sandboxes of both, and a sandbox
// made on another machine, stay until GC is told to take everything.
func TestGCRemovesOnlyLeftoversOfItsOwner(t *testing.T) {
	d := newTestDriver(t)
	gone := goneIdentity(t)
	dGone := newTestDriver(t)
	dGone.as = &gone
	elsewhere := identity{host: "another-machine", boot: "b", pid: os.Getpid(), start: procStart(os.Getpid())}
	dElse := newTestDriver(t)
	dElse.as = &elsewhere

	a, b := "gc-a-"+randID(), "gc-b-"+randID()
	liveA := start(t, d, driver.Config{ID: "gc-live-a-" + randID(), Owner: a})
	liveB := start(t, d, driver.Config{ID: "gc-live-b-" + randID(), Owner: b})
	leftA := start(t, dGone, driver.Config{ID: "gc-left-a-" + randID(), Owner: a})
	leftB := start(t, dGone, driver.Config{ID: "gc-left-b-" + randID(), Owner: b})
	otherA := start(t, dElse, driver.Config{ID: "gc-else-a-" + randID(), Owner: a})
	name := func(s *started) string { return s.c.iso.Extra["container_name"] }

	rep, err := GC(testCtx(t), GCOptions{Owner: a, OlderThan: time.Hour})
	if err != nil || len(rep.Removed) != 0 {
		t.Fatalf("GC with OlderThan an hour removed %v (err %v), want nothing", rep.Removed, err)
	}
	rep, err = GC(testCtx(t), GCOptions{Owner: a})
	if err != nil {
		t.Fatalf("GC: %v", err)
	}
	if !slices.Equal(rep.Removed, []string{name(leftA)}) {
		t.Fatalf("GC --owner %s removed %v, want only its leftover %s", a, rep.Removed, name(leftA))
	}
	kept := map[string]string{}
	for _, k := range rep.Kept {
		kept[k.Name] = k.Reason
	}
	if !strings.Contains(kept[name(liveA)], "still runs") || !strings.Contains(kept[name(otherA)], "another machine") || len(kept) != 2 {
		t.Errorf("GC kept %v; want %s (creator runs) and %s (another machine) with their reasons", kept, name(liveA), name(otherA))
	}
	waitDone(t, leftA.c, 10*time.Second)
	for _, s := range []*started{liveA, liveB, leftB, otherA} {
		if _, code := s.run(t, "true"); code != 0 {
			t.Errorf("sandbox %s stopped working after GC of owner %s", name(s), a)
		}
	}

	rep, err = GC(testCtx(t), GCOptions{Owner: b})
	if err != nil || !slices.Equal(rep.Removed, []string{name(leftB)}) {
		t.Fatalf("GC --owner %s removed %v (err %v), want only %s", b, rep.Removed, err, name(leftB))
	}
	waitDone(t, leftB.c, 10*time.Second)

	rep, err = GC(testCtx(t), GCOptions{Owner: a, All: true})
	slices.Sort(rep.Removed)
	want := []string{name(liveA), name(otherA)}
	slices.Sort(want)
	if err != nil || !slices.Equal(rep.Removed, want) {
		t.Fatalf("GC --owner %s --all removed %v (err %v), want %v", a, rep.Removed, err, want)
	}
	if _, code := liveB.run(t, "true"); code != 0 {
		t.Error("owner b's live sandbox stopped working after GC --all of owner a")
	}
}

// A sandbox with an egress policy has a host directory holding its handoff
// socket (egress_handoff.go), removed by Close. When its creator died
// without closing it, GC removes the directory with the container: it
// used to stay in the host's temporary directory for good.
func TestGCRemovesALeftoverEgressSocketDirectory(t *testing.T) {
	gone := goneIdentity(t)
	dGone := newTestDriver(t)
	dGone.as = &gone
	owner := "gc-egress-" + randID()
	left := start(t, dGone, driver.Config{ID: "gc-egress-" + randID(), Owner: owner, Egress: true})
	if left.c.handoff == nil {
		t.Fatal("a sandbox with egress on a local engine got no handoff socket")
	}
	dir := left.c.handoff.dir
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the handoff socket's directory: %v", err)
	}
	rep, err := GC(testCtx(t), GCOptions{Owner: owner})
	if err != nil || len(rep.Removed) != 1 {
		t.Fatalf("GC --owner %s removed %v (err %v), want its leftover", owner, rep.Removed, err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after GC removed the leftover, its handoff directory %s: %v, want it gone", dir, err)
	}
}

func TestSameSandboxIDTwiceIsAConflict(t *testing.T) {
	d := newTestDriver(t)
	id := "dup-" + randID()
	start(t, d, driver.Config{ID: id})
	_, err := d.Start(testCtx(t), driver.Config{ID: id})
	if codeOf(err) != driver.CodeExists || !strings.Contains(err.Error(), "sandboxkit gc") {
		t.Fatalf("second Start with the same id = %v, want code %s mentioning sandboxkit gc", err, driver.CodeExists)
	}
}

func TestEngineDownIsABackendError(t *testing.T) {
	// No engine needed: the point is that there is none.
	t.Setenv("DOCKER_HOST", "unix:///nonexistent")
	d := New(WithImage("sandboxkit/python:test"))
	defer d.Close()
	_, err := d.Start(testCtx(t), driver.Config{ID: "down"})
	if codeOf(err) != driver.CodeBackend {
		t.Fatalf("Start against a dead socket = %v, want code %s", err, driver.CodeBackend)
	}
	for _, want := range []string{"unix:///nonexistent", "DOCKER_HOST"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not mention %q", err, want)
		}
	}
}

func TestMissingImage(t *testing.T) {
	needEngine(t)
	// A registry on this machine that knows no image: the engine's pull
	// fails without any traffic leaving the host.
	var mu sync.Mutex
	var asked []string
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.Path)
		mu.Unlock()
		http.NotFound(w, r)
	}))
	defer reg.Close()
	regHost := strings.TrimPrefix(reg.URL, "http://")

	tests := []struct {
		name   string
		image  string
		pull   PullPolicy
		wantIn string
	}{
		{"a missing image with pulls off says how to get it", "sandboxkit/absent:" + randID(), PullNever, "pulling is off"},
		{"an image no registry has cannot be pulled", regHost + "/sandboxkit/absent:" + randID(), PullMissing, "cannot be pulled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newTestDriver(t, WithImage(tt.image), WithPull(tt.pull))
			var progress []string
			_, err := d.Start(testCtx(t), driver.Config{ID: "img-" + randID(), Progress: func(s string) { progress = append(progress, s) }})
			if codeOf(err) != driver.CodeNotFound || !strings.Contains(err.Error(), tt.wantIn) || !strings.Contains(err.Error(), tt.image) {
				t.Fatalf("Start = %v, want code %s naming the image and saying %q", err, driver.CodeNotFound, tt.wantIn)
			}
			if tt.pull == PullMissing && (len(progress) == 0 || !strings.Contains(progress[0], "pulling")) {
				t.Errorf("progress = %q, want a pulling line", progress)
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) == 0 {
		t.Error("the engine never asked the local registry")
	}
}

func TestBadConfigIsRefusedBeforeTouchingTheEngine(t *testing.T) {
	// resolve runs before any engine call, so a dead engine proves it.
	t.Setenv("DOCKER_HOST", "unix:///nonexistent")
	tests := []struct {
		name string
		opts []Option
		cfg  driver.Config
		code driver.Code
		say  string
	}{
		{"an unknown option names the known ones", nil, driver.Config{Options: map[string]string{"imgae": "x"}}, driver.CodeInvalidArgument, "known: image"},
		{"a user name instead of uid:gid", []Option{WithUser("nobody")}, driver.Config{}, driver.CodeInvalidArgument, "numeric uid:gid"},
		{"an unknown pull policy", nil, driver.Config{Options: map[string]string{OptPull: "sometimes"}}, driver.CodeInvalidArgument, "missing, never, always"},
		{"an id that cannot name a container", nil, driver.Config{ID: "a/b"}, driver.CodeInvalidArgument, "cannot name a container"},
		{"a bad cpu count", nil, driver.Config{Options: map[string]string{OptCPUs: "lots"}}, driver.CodeInvalidArgument, "number of CPUs"},
		{"a disk quota on a host workspace", nil, driver.Config{Workspace: "/tmp", Limits: driver.Limits{DiskBytes: 1 << 20}}, driver.CodeIsolationUnavailable, "disk quota"},
		{"a tier above what runc gives", nil, driver.Config{MinTier: driver.TierGVisor}, driver.CodeIsolationUnavailable, "runsc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := New(tt.opts...)
			defer d.Close()
			_, err := d.Start(testCtx(t), tt.cfg)
			if codeOf(err) != tt.code || !strings.Contains(err.Error(), tt.say) {
				t.Fatalf("Start = %v, want code %s saying %q", err, tt.code, tt.say)
			}
		})
	}
}

func TestMissingRuntimeIsRefused(t *testing.T) {
	d := newTestDriver(t, WithRuntime("runsc-absent"))
	_, err := d.Start(testCtx(t), driver.Config{ID: "rt-" + randID()})
	if codeOf(err) != driver.CodeIsolationUnavailable || !strings.Contains(err.Error(), "runc") {
		t.Fatalf("Start = %v, want code %s listing the engine's runtimes", err, driver.CodeIsolationUnavailable)
	}
}

func TestHostWorkspaceIsBindMounted(t *testing.T) {
	d := newTestDriver(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "in.txt"), []byte("from host"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := start(t, d, driver.Config{ID: "ws-" + randID(), Workspace: dir})
	if got := s.c.Isolation().HostWorkspace; got != dir {
		t.Errorf("HostWorkspace = %q, want %q", got, dir)
	}
	out, code := s.run(t, "sh", "-c", "cat in.txt && echo back > out.txt")
	if code != 0 || out != "from host" {
		t.Fatalf("exit %d %q, want the host file's content", code, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "out.txt"))
	if err != nil || string(b) != "back\n" {
		t.Fatalf("host sees %q (%v), want the sandbox's write", b, err)
	}
}

func TestHostWorkspaceTheUserCannotWriteIsRefused(t *testing.T) {
	d := newTestDriver(t)
	dir := t.TempDir() // 0700, owned by the test's user, not 65534
	_, err := d.Start(testCtx(t), driver.Config{ID: "wsro-" + randID(), Workspace: dir})
	if os.Getuid() == 65534 {
		t.Skip("the test runs as the sandbox user")
	}
	if codeOf(err) != driver.CodeInvalidArgument || !strings.Contains(err.Error(), "WithUser") {
		t.Fatalf("Start = %v, want code %s suggesting WithUser", err, driver.CodeInvalidArgument)
	}
}

func TestAgentBinaryChecks(t *testing.T) {
	dynamic, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	dynamic, _ = filepath.EvalSymlinks(dynamic)
	static := filepath.Join(t.TempDir(), "agent")
	cmd := exec.Command("go", "build", "-o", static, agentPkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the agent: %v\n%s", err, out)
	}
	tests := []struct {
		name, path, arch, want string
	}{
		{"a static binary of the engine's arch is accepted", static, "amd64", ""},
		{"another architecture is refused", static, "arm64", "the engine runs arm64"},
		{"a dynamically linked binary is refused", dynamic, "amd64", "CGO_ENABLED=0"},
		{"a script is refused", "/etc/passwd", "amd64", "not a Linux ELF binary"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkStaticELF(tt.path, tt.arch)
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("checkStaticELF(%s, %s) = %v, want %q", tt.path, tt.arch, err, tt.want)
			}
		})
	}
	t.Run("a dynamic binary given as the agent is an invalid argument", func(t *testing.T) {
		_, err := findAgent(context.Background(), dynamic, "amd64")
		if codeOf(err) != driver.CodeInvalidArgument || !strings.Contains(err.Error(), "go build") {
			t.Fatalf("agentFor = %v, want code %s with build instructions", err, driver.CodeInvalidArgument)
		}
	})
	t.Run("a given static agent is used as is", func(t *testing.T) {
		needEngine(t)
		d := newTestDriver(t, WithAgentBinary(static))
		dropAgentVolume(t, d, static)
		s := start(t, d, driver.Config{ID: "agentbin-" + randID()})
		if got := s.c.Isolation().Extra["agent"]; got != "docker agent option" {
			t.Errorf("agent source %q, want the option", got)
		}
	})
}

func TestHostWorkspaceOwnerBecomesTheSandboxUser(t *testing.T) {
	d := newTestDriver(t)
	dir := t.TempDir()
	uid := os.Getuid()
	if uid == 0 {
		uid = 1234
		if err := os.Chown(dir, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	s := start(t, d, driver.Config{ID: "wsown-" + randID(), Workspace: dir})
	out, code := s.run(t, "sh", "-c", "id -u && echo made > made.txt")
	if code != 0 || strings.TrimSpace(out) != strconv.Itoa(uid) {
		t.Fatalf("exit %d %q, want to run as the workspace owner %d", code, out, uid)
	}
	st, err := os.Stat(filepath.Join(dir, "made.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := fileOwner(st); got != uid {
		t.Errorf("the host sees the sandbox's file owned by %d, want %d", got, uid)
	}
}

func TestOOMKilledContainerSaysSo(t *testing.T) {
	d := newTestDriver(t)
	// tmpfs pages are charged to the container's memory and cannot be
	// reclaimed, so filling the workspace past the limit leaves the OOM
	// killer nothing but the processes, the agent included.
	s := start(t, d, driver.Config{ID: "oom-" + randID(), Limits: driver.Limits{MemoryBytes: 48 << 20, DiskBytes: 256 << 20}})
	_, _, _ = s.exec(testCtx(t), "sh", "-c", "dd if=/dev/zero of=/workspace/fill bs=1M count=200; sleep 5")
	waitDone(t, s.c, 20*time.Second)
	err := s.c.Err()
	if codeOf(err) != driver.CodeDead || !strings.Contains(err.Error(), "OOM killer") || !strings.Contains(err.Error(), "MemoryBytes") {
		t.Fatalf("Err = %v, want code %s naming the OOM killer and the memory limit", err, driver.CodeDead)
	}
}

// Without its reserve the agent cannot make its threads under a small pids
// limit, and the Go runtime aborts it: the real death of a fork bomb's
// victim, made certain. The sandbox's error must name that cause, not
// merely say the agent is gone.
func TestAgentStarvedOfThreadsSaysSo(t *testing.T) {
	d := newTestDriver(t)
	saved := agentTaskReserve
	agentTaskReserve = 0
	t.Cleanup(func() { agentTaskReserve = saved })
	inst, err := d.Start(testCtx(t), driver.Config{ID: "starved-" + randID(), Owner: "sandboxkit-docker-test", Limits: driver.Limits{Pids: 6}})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	c := inst.(*Container)
	t.Cleanup(func() { c.Close(context.Background()) })
	// The agent dies warming its threads, during or right after the
	// handshake; either way the stream ends with the cause.
	cl, err := agent.Dial(testCtx(t), c.Conn(), wire.Hello{Workspace: workspacePath, Env: []string{"PATH=/usr/bin:/bin"}})
	if err == nil {
		defer cl.Close()
		select {
		case <-cl.Done():
			err = cl.Err()
		case <-time.After(20 * time.Second):
			t.Fatal("the agent lived 20 s with 6 tasks for its threads; the test no longer starves it")
		}
	}
	waitDone(t, c, 20*time.Second)
	t.Logf("Container.Err: %v", c.Err())
	for what, got := range map[string]error{"Container.Err": c.Err(), "the agent stream's error": err} {
		if msg := fmt.Sprint(got); !strings.Contains(msg, "could not create a thread") || !strings.Contains(msg, "pids limit 6") {
			t.Errorf("%s = %v; want it to name thread exhaustion under the pids limit of 6", what, got)
		}
	}
}

// uniqueAgentBinary returns a copy of the standard agent with random bytes
// appended: it runs the same and has a sha256, so a volume, of its own.
func uniqueAgentBinary(t *testing.T) string {
	t.Helper()
	built, err := buildAgent(testCtx(t), runtime.GOARCH)
	if err != nil {
		t.Fatalf("building the agent: %v", err)
	}
	data, err := os.ReadFile(built)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "agent")
	if err := os.WriteFile(bin, append(data, []byte(randID()+randID())...), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}
