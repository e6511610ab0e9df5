//go:build linux

package linuxrunner

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// pipeInode returns the inode of a pipe, which names it in /proc/PID/fd.
func pipeInode(f *os.File) uint64 {
	fi, err := f.Stat()
	if err != nil {
		return 0
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// maxHolders bounds the processes pipeHolders lists (a fork bomb's
// hundreds would all hold the pipe).
const maxHolders = 64

// pipeScanMaxAge is how long one scan of every process's descriptors
// answers pipeHolders for every command: hundreds of commands ending at
// once each scanned /proc (every descriptor of every process), and every
// 200 ms again while a slow caller took their output: 200 concurrent
// commands of 200 KB took three minutes instead of a second.
const pipeScanMaxAge = 25 * time.Millisecond

// pipeScan is the last scan: every process holding a pipe, by the pipe's
// /proc link ("pipe:[INODE]").
var pipeScan struct {
	mu      sync.Mutex
	at      time.Time
	holders map[string][]int
}

// pipeHolders lists the processes other than the agent that hold one of
// the pipes (by inode) open: the command's children that kept its stdout
// or stderr after it exited (at most maxHolders). Only processes whose fds
// the agent may read are seen, which covers every process of the sandbox's
// uid.
func pipeHolders(inodes ...uint64) []int {
	pipeScan.mu.Lock()
	if pipeScan.holders == nil || time.Since(pipeScan.at) > pipeScanMaxAge {
		pipeScan.holders = scanPipes()
		pipeScan.at = time.Now()
	}
	all := pipeScan.holders
	pipeScan.mu.Unlock()
	seen := map[int]bool{}
	var out []int
	for _, ino := range inodes {
		if ino == 0 {
			continue
		}
		for _, pid := range all["pipe:["+strconv.FormatUint(ino, 10)+"]"] {
			if !seen[pid] && len(out) < maxHolders {
				seen[pid] = true
				out = append(out, pid)
			}
		}
	}
	return out
}

// scanPipes maps every pipe held by a process other than the agent to the
// processes holding it.
func scanPipes() map[string][]int {
	out := map[string][]int{}
	self := os.Getpid()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		fds, err := os.ReadDir("/proc/" + e.Name() + "/fd")
		if err != nil {
			continue
		}
		var last string
		for _, fd := range fds {
			l, err := os.Readlink("/proc/" + e.Name() + "/fd/" + fd.Name())
			if err != nil || !strings.HasPrefix(l, "pipe:") || l == last {
				continue
			}
			last = l
			if ps := out[l]; len(ps) == 0 || ps[len(ps)-1] != pid {
				out[l] = append(ps, pid)
			}
		}
	}
	return out
}
