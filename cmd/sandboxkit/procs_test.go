package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A procID names one process on the host: the pid and its start time, so
// that a pid reused by an unrelated process is not taken for the original.
type procID struct {
	pid   int
	start string
}

// procStat returns the parent pid and start time of pid, from the host's
// /proc (ok false when the process is gone).
func procStat(pid int) (ppid int, start string, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, "", false
	}
	// The command name (field 2) may hold spaces and parentheses: the
	// fields that follow start after the last ')'.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 20 {
		return 0, "", false
	}
	ppid, _ = strconv.Atoi(fields[1])
	return ppid, fields[19], true
}

// alive reports whether the very process p still exists (a zombie counts:
// it has not been reaped).
func alive(p procID) bool {
	_, start, ok := procStat(p.pid)
	return ok && start == p.start
}

// markedProcs returns every host process whose command line or
// environment holds marker. The environment is what finds the children of
// a shell (sleep inherits an exported variable, not the shell's command
// line); reading it needs the privileges the tests run with in CI (root),
// and the command line alone still finds the shell elsewhere.
func markedProcs(marker string) []procID {
	entries, _ := os.ReadDir("/proc")
	var out []procID
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		found := false
		for _, f := range []string{"cmdline", "environ"} {
			b, err := os.ReadFile(filepath.Join("/proc", e.Name(), f))
			if err == nil && bytes.Contains(b, []byte(marker)) {
				found = true
				break
			}
		}
		if !found {
			continue
		}
		if _, start, ok := procStat(pid); ok {
			out = append(out, procID{pid, start})
		}
	}
	return out
}

// sandboxProcs returns the processes of one sandbox as the host sees them:
// the marked processes and every ancestor between them and the server
// (the sandbox's init and agent), excluding the server itself. It fails
// the test when a marked process does not descend from the server.
func sandboxProcs(t *testing.T, serverPID int, marked []procID) []procID {
	t.Helper()
	seen := map[int]bool{}
	var out []procID
	for _, p := range marked {
		pid := p.pid
		for pid != serverPID {
			ppid, start, ok := procStat(pid)
			if !ok {
				break // ended meanwhile: nothing left to find
			}
			if ppid <= 1 {
				t.Fatalf("process %d (marked %d) does not descend from the server %d", pid, p.pid, serverPID)
			}
			if !seen[pid] {
				seen[pid] = true
				out = append(out, procID{pid, start})
			}
			pid = ppid
		}
	}
	return out
}

// waitGone waits until none of procs exists any more, for a bounded while
// (a killed process may take a moment to be reaped by whoever inherits
// it), and returns those still there, described for a message.
func waitGone(procs []procID) []string {
	var left []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		left = nil
		for _, p := range procs {
			if alive(p) {
				left = append(left, fmt.Sprintf("%d %s", p.pid, cmdline(p)))
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
	}
}

// cmdline returns p's command line for messages.
func cmdline(p procID) string {
	b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.pid), "cmdline"))
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}
