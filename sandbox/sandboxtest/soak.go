package sandboxtest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// SoakOptions shapes RunSoak.
type SoakOptions struct {
	// Sandboxes run at once (default 20).
	Sandboxes int
	// Duration of the mixed load (default 40 s); closing and the checks
	// come after it.
	Duration time.Duration
	// Leftovers, when set, lists what the backend left behind once every
	// sandbox is closed (containers, cgroups, temporary directories),
	// given the sandboxes' IDs; RunSoak fails on every entry.
	Leftovers func(ids []string) []string
}

// soakFiles is the number of files each sandbox keeps rewriting.
const soakFiles = 4

// RunSoak runs a mixed load on many sandboxes at once for a bounded time —
// commands, file writes (some cancelled in flight), searches, timeouts,
// job kills (with daemons that left the job's tree), cancelled runs,
// Python runs and a fork bomb — and then checks that nothing was lost or
// left behind: every file holds one whole version that was written to it
// (never a torn or empty one), no process of any sandbox survives Close,
// no temporary file is left in a workspace, the backend leaves nothing
// (SoakOptions.Leftovers), and no call failed with SBX_INTERNAL or with an
// error its action does not expect.
func RunSoak(t *testing.T, newSandbox Factory, o SoakOptions) {
	if o.Sandboxes <= 0 {
		o.Sandboxes = 20
	}
	if o.Duration <= 0 {
		o.Duration = 40 * time.Second
	}
	marker := newMarker()
	type worker struct {
		ws       string
		sb       *sandbox.Sandbox
		id       string
		agentPID int                          // 0 when the backend does not report it
		written  [soakFiles]map[[32]byte]bool // every version a write was attempted with
	}
	workers := make([]*worker, o.Sandboxes)
	var mu sync.Mutex
	counts := map[string]int{}
	count := func(what string) {
		mu.Lock()
		counts[what]++
		mu.Unlock()
	}
	// Creating them is part of the load: all at once.
	var wg sync.WaitGroup
	for i := range workers {
		// A host workspace, kept after Close, so that its files can be
		// checked there; writable by the sandbox's uid whichever it is (a
		// container's user is not the test's).
		ws, err := os.MkdirTemp("", "sandboxkit-soak-")
		if err == nil {
			err = os.Chmod(ws, 0o777)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(ws) })
		w := &worker{ws: ws}
		for f := range w.written {
			w.written[f] = map[[32]byte]bool{}
		}
		workers[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			lim := sandbox.Limits{Pids: 256, MaxOutputBytes: 256 << 10, Timeout: 20 * time.Second}
			if i == 0 {
				lim.Pids = 64 // the fork bomb's sandbox
			}
			w.sb = newSandbox(t, sandbox.WithWorkspace(w.ws), sandbox.WithLimits(lim))
			if w.sb != nil {
				w.id = w.sb.Info().ID
				w.agentPID, _ = strconv.Atoi(w.sb.Info().Extra["agent_pid"])
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		for _, w := range workers {
			if w.sb != nil {
				w.sb.Close()
			}
		}
		t.FailNow()
	}
	sleep := "sleep " + marker
	deadline := time.Now().Add(o.Duration)
	fail := func(w *worker, what string, err error) {
		if sandbox.CodeOf(err) == sandbox.CodeInternal {
			t.Errorf("sandbox %s: %s: SBX_INTERNAL: %v", w.id, what, err)
			return
		}
		t.Errorf("sandbox %s: %s: %v", w.id, what, err)
	}
	for i, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
			ctx := context.Background()
			if i == 0 {
				// A fork bomb, at the start, while the others load the
				// machine, as a background job that is killed after 2 s
				// (each bomb process waits for its children, so it holds
				// the pids limit full until then); the sandbox must serve
				// everything afterwards.
				j, err := w.sb.Commands.Start(ctx, sandbox.Command{Shell: `bomb() { bomb & bomb & wait; }; bomb`})
				if err != nil {
					fail(w, "fork bomb", err)
				} else {
					time.Sleep(2 * time.Second)
					if err := j.Kill(ctx); err != nil {
						fail(w, "fork bomb kill", err)
					}
					if _, err := j.Wait(ctx); err != nil {
						fail(w, "fork bomb wait", err)
					}
				}
				count("fork bomb")
			}
			for v := 0; time.Now().Before(deadline); v++ {
				switch rng.IntN(9) {
				case 0, 1: // a write, a quarter of them cancelled in flight
					f := rng.IntN(soakFiles)
					name := fmt.Sprintf("data-%d.txt", f)
					data := []byte(strings.Repeat(fmt.Sprintf("%s v%d of %d\n", name, v, i), 1+rng.IntN(8000)))
					w.written[f][sha256.Sum256(data)] = true
					wctx, cancel := context.WithCancel(ctx)
					if rng.IntN(4) == 0 {
						time.AfterFunc(time.Duration(rng.IntN(3000))*time.Microsecond, cancel)
					}
					err := w.sb.Files.Write(wctx, name, data, 0o644)
					cancel()
					switch {
					case err == nil:
						count("write")
					case sandbox.CodeOf(err) == sandbox.CodeCanceled || errors.Is(err, context.Canceled):
						count("write cancelled")
					default:
						fail(w, "write "+name, err)
					}
				case 2: // a command whose output is checked
					n := 1 + rng.IntN(20000)
					res, err := w.sb.Commands.Run(ctx, sandbox.Command{Shell: fmt.Sprintf("seq 1 %d | tail -n 1", n)})
					if err != nil {
						fail(w, "command", err)
					} else if res.Stdout != fmt.Sprintf("%d\n", n) || res.ExitCode != 0 {
						t.Errorf("sandbox %s: seq 1 %d | tail -n 1: exit %d stdout %q stderr %q", w.id, n, res.ExitCode, res.Stdout, res.Stderr)
					}
					count("command")
				case 3: // a search over the files being rewritten
					if _, err := w.sb.Files.Search(ctx, sandbox.SearchOptions{Pattern: `v[0-9]+ of`, MaxResults: 50}); err != nil && sandbox.CodeOf(err) != sandbox.CodeNoMatch {
						fail(w, "search", err)
					}
					count("search")
				case 4: // a timeout that kills a tree with a daemon
					_, err := w.sb.Commands.Run(ctx, sandbox.Command{Shell: "setsid sh -c '" + sleep + " &'; " + sleep, Timeout: 300 * time.Millisecond})
					if !errors.Is(err, sandbox.ErrTimeout) {
						fail(w, "timeout", err)
					}
					count("timeout")
				case 5: // a job with daemons, killed
					j, err := w.sb.Commands.Start(ctx, sandbox.Command{Shell: "(setsid " + sleep + " &); " + sleep})
					if err != nil {
						fail(w, "job start", err)
						break
					}
					time.Sleep(time.Duration(rng.IntN(200)) * time.Millisecond)
					if err := j.Kill(ctx); err != nil {
						fail(w, "job kill", err)
					}
					if _, err := j.Wait(ctx); err != nil {
						fail(w, "job wait", err)
					}
					count("job killed")
				case 6: // a run cancelled by its caller
					cctx, cancel := context.WithTimeout(ctx, time.Duration(50+rng.IntN(200))*time.Millisecond)
					_, err := w.sb.Commands.Run(cctx, sandbox.Command{Shell: "(" + sleep + " &); " + sleep})
					cancel()
					if err == nil || (sandbox.CodeOf(err) != sandbox.CodeCanceled && sandbox.CodeOf(err) != sandbox.CodeTimeout &&
						!errors.Is(err, context.DeadlineExceeded)) {
						fail(w, "cancelled run", err)
					}
					count("cancelled run")
				case 7, 8: // Python
					if w.sb.Info().Python == "" {
						continue
					}
					ex, err := w.sb.Python.Run(ctx, fmt.Sprintf("x = %d\nsum(range(x))", v), sandbox.PythonRunOptions{})
					switch {
					case err != nil:
						fail(w, "python", err)
					case ex.Error != nil || ex.Result == nil || ex.Result.Plain() != fmt.Sprint(v*(v-1)/2):
						t.Errorf("sandbox %s: python sum(range(%d)): %+v", w.id, v, ex)
					}
					count("python")
				}
			}
		}()
	}
	wg.Wait()
	// Every process the load started was in a command that timed out, was
	// cancelled or killed: none may be left, even before Close.
	expectNoSurvivors(t, marker, "the soak's timeouts, cancels and kills (before Close)")
	// Every sandbox still works, then closes.
	var ids []string
	for _, w := range workers {
		ids = append(ids, w.id)
		res, err := w.sb.Commands.Run(context.Background(), sandbox.Command{Args: []string{"echo", "alive"}})
		if err != nil || res.Stdout != "alive\n" {
			t.Errorf("sandbox %s after the soak: %v %+v", w.id, err, res)
		}
	}
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.sb.Close(); err != nil {
				t.Errorf("sandbox %s: Close: %v", w.id, err)
			}
		}()
	}
	wg.Wait()
	expectNoSurvivors(t, marker, "Close after the soak")
	for _, w := range workers {
		if pid := w.agentPID; pid > 0 {
			eventually(t, fmt.Sprintf("sandbox %s's agent (pid %d) gone after Close", w.id, pid), 5*time.Second, func() bool {
				return gone(pid)
			})
		}
	}
	// Nothing lost: each file is one whole version written to it.
	for _, w := range workers {
		for f := range soakFiles {
			name := fmt.Sprintf("data-%d.txt", f)
			b, err := os.ReadFile(filepath.Join(w.ws, name))
			if errors.Is(err, os.ErrNotExist) && len(w.written[f]) == 0 {
				continue
			}
			if err != nil {
				if len(w.written[f]) > 0 && errors.Is(err, os.ErrNotExist) {
					// Every write of it may have been cancelled.
					continue
				}
				t.Errorf("sandbox %s: %s: %v", w.id, name, err)
				continue
			}
			if !w.written[f][sha256.Sum256(b)] {
				t.Errorf("sandbox %s: %s holds %d bytes that are no version written to it (torn or lost: %.60q...)", w.id, name, len(b), b)
			}
		}
		// No temporary file of an interrupted write is left behind.
		_ = filepath.WalkDir(w.ws, func(p string, d os.DirEntry, err error) error {
			if err == nil && strings.HasPrefix(d.Name(), ".sbx-tmp") {
				t.Errorf("sandbox %s: temporary file %s left in the workspace", w.id, p)
			}
			return nil
		})
	}
	if o.Leftovers != nil {
		for _, l := range o.Leftovers(ids) {
			t.Errorf("left behind after Close: %s", l)
		}
	}
	var keys []string
	for k, n := range counts {
		keys = append(keys, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(keys)
	t.Logf("soak of %d sandboxes for %s: %s", o.Sandboxes, o.Duration, strings.Join(keys, ", "))
}
