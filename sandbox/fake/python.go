package fake

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// serveKernel plays the Python kernel driver (sandbox/pykernel/driver.py)
// on a process stream: it takes the driver source the bootstrap sends,
// says it is ready, then answers each run request from the script with the
// driver's JSON-lines messages. A SIGINT ends a hanging cell with
// KeyboardInterrupt, as the real driver does.
func (s *server) serveKernel(r *request, a wire.ExecRequest) (any, *wire.WireError) {
	pid := s.pid()
	start := time.Now()
	interrupts := make(chan struct{}, 1)
	killed := make(chan struct{})
	var killOnce sync.Once
	r.setSignalHandler(func(sr wire.SignalRequest) {
		switch syscall.Signal(sr.Signal) {
		case syscall.SIGINT:
			select {
			case interrupts <- struct{}{}:
			default:
			}
		case syscall.SIGKILL, syscall.SIGTERM:
			killOnce.Do(func() { close(killed) })
		}
	})
	r.event(wire.Event{Kind: "started", PID: pid})
	exit := func(code int, sig string) (any, *wire.WireError) {
		return wire.ExecReply{PID: pid, ExitCode: code, Signal: sig, DurationNs: time.Since(start).Nanoseconds()}, nil
	}
	in := bufio.NewReader(r)
	var hdr [8]byte
	if _, err := io.ReadFull(in, hdr[:]); err != nil {
		return exit(3, "")
	}
	n, err := strconv.Atoi(string(hdr[:]))
	if err != nil || n < 0 {
		return exit(3, "")
	}
	if _, err := io.CopyN(io.Discard, in, int64(n)); err != nil {
		return exit(3, "")
	}
	send := func(v any) bool {
		b, _ := json.Marshal(v)
		return r.sendData(wire.FrameStdout, append(b, '\n'))
	}
	if !send(map[string]any{"t": "ready", "pid": pid, "version": "3.12.0", "executable": "/usr/bin/python3"}) {
		return exit(137, "SIGKILL")
	}
	for {
		line, err := in.ReadBytes('\n')
		if err != nil {
			select {
			case <-killed:
				return exit(137, "SIGKILL")
			default:
			}
			if r.ctx.Err() != nil {
				return exit(137, "SIGKILL")
			}
			return exit(0, "")
		}
		var req struct {
			Op   string `json:"op"`
			N    int    `json:"n"`
			Code string `json:"code"`
		}
		if err := json.Unmarshal(line, &req); err != nil || req.Op != "run" {
			send(map[string]any{"t": "bad", "msg": "fake kernel: cannot parse request"})
			continue
		}
		// Interrupts meant for an earlier cell do not carry over.
		select {
		case <-interrupts:
		default:
		}
		if !s.runCell(r, req.N, req.Code, send, interrupts, killed) {
			return exit(137, "SIGKILL")
		}
	}
}

// runCell answers one run request; false means the process was killed.
func (s *server) runCell(r *request, count int, code string, send func(any) bool, interrupts, killed chan struct{}) bool {
	text := strings.TrimSpace(code)
	idx := s.fk.rec.add(Call{Kind: KindPython, Op: "python.run", Text: code, Policy: s.fk.policy(0, nil)})
	f, ok := find(&s.fk.Script.mu, s.fk.Script.python, text)
	var rep PythonReply
	if ok {
		s.fk.rec.markScripted(idx)
		rep = f(r.ctx, code)
	} else {
		msg := unscripted("python", text)
		s.fk.unscripted(msg)
		s.fk.rec.setErr(idx, "NotScriptedError")
		rep = PythonReply{Error: &PythonError{Name: "NotScriptedError", Value: msg}}
	}
	if rep.Stdout != "" && !send(map[string]any{"t": "out", "n": "stdout", "d": rep.Stdout}) {
		return false
	}
	if rep.Stderr != "" && !send(map[string]any{"t": "out", "n": "stderr", "d": rep.Stderr}) {
		return false
	}
	for _, d := range rep.Displays {
		if !send(bundle("display", d, "")) {
			return false
		}
	}
	status := "ok"
	if rep.Hang {
		select {
		case <-interrupts:
			rep.Error = &PythonError{Name: "KeyboardInterrupt", Traceback: []string{"KeyboardInterrupt"}}
			status = "interrupted"
		case <-killed:
			return false
		case <-r.ctx.Done():
			return false
		}
	} else if rep.Result != "" || len(rep.ResultData) > 0 {
		if !send(bundle("result", rep.ResultData, rep.Result)) {
			return false
		}
	}
	if e := rep.Error; e != nil {
		tb := e.Traceback
		if tb == nil {
			tb = []string{}
		}
		if !send(map[string]any{"t": "error", "ename": e.Name, "evalue": e.Value, "tb": tb}) {
			return false
		}
		if status == "ok" {
			status = "error"
			if e.Name == "SystemExit" {
				status = "exit"
			}
		}
	}
	return send(map[string]any{"t": "done", "n": count, "status": status})
}

// bundle encodes a MIME bundle as the driver does: text as is, images and
// other non-text content base64 encoded and listed in "bin".
func bundle(kind string, data map[string][]byte, plain string) map[string]any {
	out := map[string]string{}
	bin := []string{}
	for mime, v := range data {
		if strings.HasPrefix(mime, "image/") && mime != "image/svg+xml" || !utf8.Valid(v) {
			out[mime] = base64.StdEncoding.EncodeToString(v)
			bin = append(bin, mime)
			continue
		}
		out[mime] = string(v)
	}
	if plain != "" {
		out["text/plain"] = plain
	}
	if _, ok := out["text/plain"]; !ok {
		out["text/plain"] = "<object>"
	}
	return map[string]any{"t": kind, "data": out, "bin": bin}
}
