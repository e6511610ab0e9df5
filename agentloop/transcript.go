package agentloop

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	goopenai "github.com/sashabaranov/go-openai"
)

// Kind names the kind of a transcript [Record].
type Kind string

// The kinds of record, in the order a run writes them: one start, then per step a turn and
// its tool results (and any retries before the turn), then one end.
const (
	KindStart      Kind = "start"
	KindRetry      Kind = "retry"
	KindTurn       Kind = "turn"
	KindToolResult Kind = "tool_result"
	KindEnd        Kind = "end"
)

// Record is one line of a transcript. It is one flat struct rather than a type per kind so
// that a transcript stays easy to read, grep and write by hand; each kind uses the fields
// its comment names.
type Record struct {
	Kind Kind      `json:"kind"`           // what the record is
	Time time.Time `json:"time"`           // when it was written
	Step int       `json:"step,omitempty"` // the step, from 1 (0 outside a step)

	// start: what the run was given.
	Model  string   `json:"model,omitempty"`
	System string   `json:"system,omitempty"`
	Task   string   `json:"task,omitempty"`
	Tools  []string `json:"tools,omitempty"`

	// turn: the assistant message exactly as the model sent it, how it ended and what it
	// cost. These are what a replay feeds back.
	Message      *goopenai.ChatCompletionMessage `json:"message,omitempty"`
	FinishReason string                          `json:"finish_reason,omitempty"`
	Usage        *Usage                          `json:"usage,omitempty"`

	// tool_result: the answer the model read (Content), for Tool's call ToolCallID.
	ToolCallID string `json:"tool_call_id,omitempty"`
	Tool       string `json:"tool,omitempty"`
	Content    string `json:"content,omitempty"`

	// retry: the failed attempt and the wait before the next one.
	Attempt int    `json:"attempt,omitempty"`
	WaitMS  int64  `json:"wait_ms,omitempty"`
	Error   string `json:"error,omitempty"` // also on end, when the run failed

	// end: the outcome (Usage holds the run's totals).
	Reason    StopReason `json:"reason,omitempty"`
	Answer    string     `json:"answer,omitempty"`
	ElapsedMS int64      `json:"elapsed_ms,omitempty"`
}

// Transcript is a recorded run, as read by [ReadTranscript].
type Transcript struct {
	// Records are the transcript's lines, in order.
	Records []Record
}

// ReadTranscript reads a JSONL transcript. Blank lines are skipped; a line that is not a
// record, or a transcript without a start record, is an error naming the line.
func ReadTranscript(r io.Reader) (*Transcript, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20) // tool outputs make long lines
	var t Transcript
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var rec Record
		if err := json.Unmarshal(line, &rec); err != nil {
			return nil, fmt.Errorf("agentloop: transcript line %d: %w", n, err)
		}
		switch rec.Kind {
		case KindStart, KindRetry, KindTurn, KindToolResult, KindEnd:
		default:
			return nil, fmt.Errorf("agentloop: transcript line %d: unknown kind %q (want start, turn, tool_result, retry or end)", n, rec.Kind)
		}
		if rec.Kind == KindTurn && rec.Message == nil {
			return nil, fmt.Errorf("agentloop: transcript line %d: turn without a message", n)
		}
		t.Records = append(t.Records, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("agentloop: reading transcript: %w", err)
	}
	if len(t.Records) == 0 || t.Records[0].Kind != KindStart {
		return nil, errors.New("agentloop: transcript does not begin with a start record")
	}
	return &t, nil
}

// Start returns the start record: the model, system prompt, task and tools of the run.
func (t *Transcript) Start() Record { return t.Records[0] }

// Turns returns the model's turns in order.
func (t *Transcript) Turns() []Record {
	var turns []Record
	for _, r := range t.Records {
		if r.Kind == KindTurn {
			turns = append(turns, r)
		}
	}
	return turns
}

// recorder writes records as JSON lines. It keeps the first write error, which ends the
// run: a caller who asked for a transcript must not silently get half of one.
type recorder struct {
	w   io.Writer
	err error
}

func (r *recorder) write(rec Record) error {
	if r.w == nil || r.err != nil {
		return r.err
	}
	if rec.Time.IsZero() {
		rec.Time = time.Now().UTC()
	}
	b, err := json.Marshal(rec)
	if err == nil {
		_, err = r.w.Write(append(b, '\n'))
	}
	if err != nil {
		r.err = fmt.Errorf("agentloop: writing transcript: %w", err)
	}
	return r.err
}
