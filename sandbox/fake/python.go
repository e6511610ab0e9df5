package fake

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// isKernel reports whether args start the Python kernel driver (the
// bootstrap of sandbox/pykernel, which reads the driver from stdin).
func isKernel(args []string, stdin, pty bool) bool {
	return stdin && !pty && len(args) == 4 && args[1] == "-u" && args[2] == "-c" && strings.Contains(args[3], "<sandboxkit-driver>")
}

// playKernel is the Python kernel driver (sandbox/pykernel/driver.py) as
// a scripted process: it takes the driver source the bootstrap reads from
// stdin, says it is ready, then answers each run request from the script
// with the driver's JSON-lines messages. SIGINT ends a hanging cell with
// KeyboardInterrupt, as the real driver does. It returns the exit status.
func (fk *Fake) playKernel(p *proc) int {
	in := bufio.NewReader(p.stdin)
	if !readDriverSource(in) {
		return 3
	}
	interrupts := make(chan struct{}, 1)
	p.setSignalHandler(func(sig int, _ bool) bool {
		if sig != sigINT {
			return false
		}
		interrupt(interrupts)
		return true
	})
	return fk.serveKernel(p, in, p.stdout, p.pid, interrupts)
}

// readDriverSource consumes the driver source the bootstrap reads from
// stdin: eight digits of length, then the source.
func readDriverSource(in *bufio.Reader) bool {
	var hdr [8]byte
	if _, err := io.ReadFull(in, hdr[:]); err != nil {
		return false
	}
	n, err := strconv.Atoi(string(hdr[:]))
	if err != nil || n < 0 {
		return false
	}
	_, err = io.CopyN(io.Discard, in, int64(n))
	return err == nil
}

// interrupt delivers a SIGINT to a kernel player; one pending is enough.
func interrupt(interrupts chan struct{}) {
	select {
	case interrupts <- struct{}{}:
	default:
	}
}

// serveKernel is a context's side of the kernel protocol on in and out: it
// says it is ready (as process pid), then answers run requests until in
// closes. p is the process whose end ends the context.
func (fk *Fake) serveKernel(p *proc, in *bufio.Reader, out io.Writer, pid int, interrupts chan struct{}) int {
	send := func(v any) bool {
		b, _ := json.Marshal(v)
		_, err := out.Write(append(b, '\n'))
		return err == nil
	}
	if !send(map[string]any{"t": "ready", "pid": pid, "version": "3.12.0", "executable": "/usr/bin/python3"}) {
		return 1
	}
	for {
		line, err := in.ReadBytes('\n')
		if err != nil {
			return 0 // stdin closed: the driver exits
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
		if !fk.runCell(p, req.N, req.Code, send, interrupts) {
			return 1
		}
	}
}

// isTemplate reports whether args start the driver as a template
// (sandbox.WithPythonImports): the kernel's bootstrap followed by
// "template" and the modules to import.
func isTemplate(args []string, stdin, pty bool) bool {
	return stdin && !pty && len(args) >= 5 && args[1] == "-u" && args[2] == "-c" && args[4] == "template" && strings.Contains(args[3], "<sandboxkit-driver>")
}

// isStub reports whether args start a forked context's stand-in process
// (pykernel's stubArgv, `sleep 2147483647`), which only lends its pipes
// to the context forked for it. (A script cannot answer that exact
// command line: the fake plays it as the stand-in it is.)
func isStub(args []string, pty bool) bool {
	return !pty && len(args) == 2 && path.Base(args[0]) == "sleep" && args[1] == "2147483647"
}

// playStub is the stand-in: it runs until it is killed, by the template
// when its context ends or by the agent when the context is killed.
func playStub(p *proc) int {
	<-p.ctx.Done()
	return 128 + sigKILL
}

// playTemplate is the driver's template (see sandbox/pykernel/template.go
// and driver.py) as a scripted process: it "imports" the modules (every
// import succeeds: the fake has no modules to miss), says it is ready,
// then answers fork requests by serving a context on the stand-in's pipes
// (a player of the kernel, as playKernel is, scripted by the same rules),
// signal requests by interrupting that context, and reports each
// context's exit, killing its stand-in as the real template does.
func (fk *Fake) playTemplate(p *proc) int {
	in := bufio.NewReader(p.stdin)
	if !readDriverSource(in) {
		return 3
	}
	p.setSignalHandler(func(sig int, _ bool) bool { return sig == sigINT }) // contexts take their own
	var wmu sync.Mutex
	send := func(v any) bool {
		b, _ := json.Marshal(v)
		wmu.Lock()
		defer wmu.Unlock()
		_, err := p.stdout.Write(append(b, '\n'))
		return err == nil
	}
	if !send(map[string]any{"t": "ready", "pid": p.pid, "version": "3.12.0", "executable": "/usr/bin/python3"}) {
		return 1
	}
	var mu sync.Mutex
	kids := map[int]chan struct{}{} // a live context's interrupts, by its pid
	for {
		line, err := in.ReadBytes('\n')
		if err != nil {
			return 0 // Go closed stdin: the template is done
		}
		var req struct {
			Op   string `json:"op"`
			N    int    `json:"n"`
			Stub int    `json:"stub"`
			PID  int    `json:"pid"`
			Sig  int    `json:"sig"`
		}
		if err := json.Unmarshal(line, &req); err != nil {
			send(map[string]any{"t": "bad", "msg": "fake template: cannot parse request"})
			continue
		}
		switch req.Op {
		case "signal":
			mu.Lock()
			ch := kids[req.PID]
			mu.Unlock()
			if ch != nil && req.Sig == sigINT {
				interrupt(ch)
			}
		case "fork":
			stub := p.runner.byPID(req.Stub)
			if stub == nil || stub.stdin == nil {
				send(map[string]any{"t": "forked", "n": req.N, "msg": fmt.Sprintf("process %d: No such process", req.Stub)})
				continue
			}
			pid := fk.nextPID()
			interrupts := make(chan struct{}, 1)
			mu.Lock()
			kids[pid] = interrupts
			mu.Unlock()
			send(map[string]any{"t": "forked", "n": req.N, "pid": pid})
			go func() {
				code := fk.serveKernel(stub, bufio.NewReader(stub.stdin), stub.stdout, pid, interrupts)
				if stub.ctx.Err() != nil {
					code = 128 + sigKILL // the stand-in was killed, and the context with it
				}
				mu.Lock()
				delete(kids, pid)
				mu.Unlock()
				send(map[string]any{"t": "exit", "pid": pid, "code": code})
				stub.end(128+sigKILL, true)
			}()
		default:
			send(map[string]any{"t": "bad", "msg": "fake template: unknown op " + strconv.Quote(req.Op)})
		}
	}
}

// runCell answers one run request; false means the process is gone.
func (fk *Fake) runCell(p *proc, count int, code string, send func(any) bool, interrupts <-chan struct{}) bool {
	text := strings.TrimSpace(code)
	idx := fk.rec.add(fk.Clock, Call{Kind: KindPython, Op: "python.run", Text: code, Policy: fk.policy(0, nil)})
	f, ok := find(&fk.Script.mu, fk.Script.python, text)
	var rep PythonReply
	if ok {
		fk.rec.markScripted(idx)
		rep = f(p.ctx, code)
	} else {
		msg := unscripted("python", text)
		fk.unscripted(msg)
		fk.rec.setErr(idx, "NotScriptedError")
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
		case <-p.ctx.Done():
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
