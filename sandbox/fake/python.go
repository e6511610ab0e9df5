package fake

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"io"
	"strconv"
	"strings"
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
	var hdr [8]byte
	if _, err := io.ReadFull(in, hdr[:]); err != nil {
		return 3
	}
	n, err := strconv.Atoi(string(hdr[:]))
	if err != nil || n < 0 {
		return 3
	}
	if _, err := io.CopyN(io.Discard, in, int64(n)); err != nil {
		return 3
	}
	send := func(v any) bool {
		b, _ := json.Marshal(v)
		_, err := p.stdout.Write(append(b, '\n'))
		return err == nil
	}
	interrupts := make(chan struct{}, 1)
	p.setSignalHandler(func(sig int, _ bool) bool {
		if sig != sigINT {
			return false
		}
		select {
		case interrupts <- struct{}{}:
		default:
		}
		return true
	})
	if !send(map[string]any{"t": "ready", "pid": p.pid, "version": "3.12.0", "executable": "/usr/bin/python3"}) {
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
