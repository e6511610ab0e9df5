package pykernel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

func TestDecodeMessage(t *testing.T) {
	cases := []struct {
		name    string
		line    string
		wantErr bool
		check   func(t *testing.T, m message)
	}{
		{name: "stdout chunk", line: `{"t":"out","n":"stdout","d":"hi\n"}`, check: func(t *testing.T, m message) {
			if m.stream != "stdout" || m.text != "hi\n" {
				t.Fatalf("%+v", m)
			}
		}},
		{name: "image is decoded from base64", line: `{"t":"display","data":{"text/plain":"<Figure>","image/png":"iVBORw=="},"bin":["image/png"]}`,
			check: func(t *testing.T, m message) {
				if !bytes.Equal(m.data[MIMEPNG], []byte("\x89PNG")) || string(m.data[MIMEText]) != "<Figure>" {
					t.Fatalf("%q", m.data)
				}
			}},
		{name: "done", line: `{"t":"done","n":3,"status":"exit","dout":5}`, check: func(t *testing.T, m message) {
			if m.done.count != 3 || m.done.status != "exit" || m.done.droppedOut != 5 {
				t.Fatalf("%+v", m.done)
			}
		}},
		{name: "error", line: `{"t":"error","ename":"NameError","evalue":"x","tb":["a","b"]}`, check: func(t *testing.T, m message) {
			if m.err.Name != "NameError" || len(m.err.Traceback) != 2 {
				t.Fatalf("%+v", m.err)
			}
		}},
		{name: "a traceback line is not a message", line: "Traceback (most recent call last):", wantErr: true},
		{name: "unknown type", line: `{"t":"boom"}`, wantErr: true},
		{name: "stream that does not exist", line: `{"t":"out","n":"stdin","d":"x"}`, wantErr: true},
		{name: "bundle without text/plain", line: `{"t":"result","data":{"text/html":"<b>"}}`, wantErr: true},
		{name: "bad base64", line: `{"t":"display","data":{"text/plain":"","image/png":"!!"},"bin":["image/png"]}`, wantErr: true},
		{name: "binary type without data", line: `{"t":"display","data":{"text/plain":""},"bin":["image/png"]}`, wantErr: true},
		{name: "done without count", line: `{"t":"done","status":"ok"}`, wantErr: true},
		{name: "done with unknown status", line: `{"t":"done","n":1,"status":"meh"}`, wantErr: true},
		{name: "negative drop count", line: `{"t":"done","n":1,"status":"ok","dout":-1}`, wantErr: true},
		{name: "error without name", line: `{"t":"error","evalue":"x"}`, wantErr: true},
		{name: "truncated JSON", line: `{"t":"out","n":"std`, wantErr: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := decodeMessage([]byte(c.line))
			if (err != nil) != c.wantErr {
				t.Fatalf("err = %v, want error %v", err, c.wantErr)
			}
			if c.check != nil {
				c.check(t, m)
			}
		})
	}
}

func TestLineReaderSkipsLinesOverTheCap(t *testing.T) {
	in := "short\n" + strings.Repeat("x", 1000) + "\nafter\nlast"
	lr := newLineReader(strings.NewReader(in), 100)
	var got []string
	for {
		line, err := lr.next()
		if errors.Is(err, errLineTooLong) {
			got = append(got, "<too long>")
			continue
		}
		if err != nil {
			break
		}
		got = append(got, string(line))
	}
	if strings.Join(got, "|") != "short|<too long>|after|last" {
		t.Fatalf("got %q", got)
	}
}

// FuzzDecoder feeds arbitrary driver output through the framing and the
// decoder: it must never panic, never return a line over the cap, and only
// return messages with the shape the kernel relies on.
func FuzzDecoder(f *testing.F) {
	for _, s := range []string{
		`{"t":"ready","pid":12,"version":"3.11.2","executable":"/usr/bin/python3"}` + "\n",
		`{"t":"out","n":"stderr","d":"\u00e9\n"}` + "\n" + `{"t":"done","n":1,"status":"ok"}` + "\n",
		`{"t":"result","data":{"text/plain":"6"},"bin":[]}` + "\n",
		`{"t":"display","data":{"text/plain":"x","image/jpeg":"/9j/"},"bin":["image/jpeg","image/jpeg"]}`,
		`{"t":"error","ename":"E","tb":null}` + "\n\n\n",
		`{"t":"done","n":"1","status":"ok","dout":1e3}`,
		`{"t":"bad","msg":"bad request"}` + "\r\n",
		"\x00\xff{\n{{{\n",
		strings.Repeat("y", 300) + "\n{}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const limit = 256
		lr := newLineReader(bytes.NewReader(data), limit)
		for i := 0; ; i++ {
			if i > len(data)+1 {
				t.Fatal("reader does not make progress")
			}
			line, err := lr.next()
			if errors.Is(err, errLineTooLong) {
				continue
			}
			if err == io.EOF {
				return
			}
			if err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if len(line) > limit {
				t.Fatalf("line of %d bytes over the cap", len(line))
			}
			m, err := decodeMessage(line)
			if err != nil {
				continue
			}
			switch m.kind {
			case msgOut:
				if m.stream != "stdout" && m.stream != "stderr" {
					t.Fatalf("stream %q", m.stream)
				}
			case msgDisplay, msgResult:
				if _, ok := m.data[MIMEText]; !ok {
					t.Fatal("bundle without text/plain")
				}
			case msgError:
				if m.err == nil || m.err.Name == "" {
					t.Fatal("error without name")
				}
			case msgDone:
				if m.done.droppedOut < 0 || m.done.droppedErr < 0 || m.done.droppedDsp < 0 {
					t.Fatal("negative counts")
				}
			case msgReady, msgBad, msgFatal:
			default:
				t.Fatalf("kind %q", m.kind)
			}
		}
	})
}

// TestDriverSurvivesBadRequests speaks to the driver directly: requests it
// cannot understand get a "bad" answer and the next good request still runs.
func TestDriverSurvivesBadRequests(t *testing.T) {
	needPython(t)
	p, err := ExecProc(context.Background(), []string{testPython, "-u", "-c", bootstrap}, nil, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Kill(); _, _ = p.Wait() }()
	in := fmt.Sprintf("%08d", len(driverSource)) + driverSource +
		"not json\n[1, 2]\n{\"op\": \"fly\"}\n\xff\xfe\n" +
		`{"op":"run","n":1,"code":"6*7","max":1000,"maxd":1000}` + "\n"
	go func() { _, _ = io.WriteString(p.Stdin(), in) }()
	lr := newLineReader(p.Stdout(), 1<<20)
	var kinds []string
	for len(kinds) < 20 {
		line, err := lr.next()
		if err != nil {
			t.Fatalf("after %v: %v", kinds, err)
		}
		m, err := decodeMessage(line)
		if err != nil {
			t.Fatalf("driver sent %q: %v", line, err)
		}
		kinds = append(kinds, m.kind)
		if m.kind == msgResult && string(m.data[MIMEText]) != "42" {
			t.Fatalf("result %q", m.data[MIMEText])
		}
		if m.kind == msgDone {
			break
		}
	}
	if got := strings.Join(kinds, ","); got != "ready,bad,bad,bad,bad,result,done" {
		t.Fatalf("messages: %s", got)
	}
}
