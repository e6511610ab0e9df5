package wire

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// Hello is the client's first frame: the protocol version and the settings
// the agent applies to every request.
type Hello struct {
	Version int `json:"version"`
	// Workspace is the workspace directory as the agent sees it. File
	// requests are confined to it; relative command dirs start there.
	Workspace string `json:"workspace"`
	// Env is the base environment of every process (KEY=VALUE). The host's
	// environment never reaches the agent's children: only this list and
	// what a request adds.
	Env []string `json:"env"`
	// FileSizeBytes caps a single file written through the file API (0 = none).
	FileSizeBytes int64 `json:"file_size_bytes,omitempty"`
	// DiskBytes caps the workspace's total size for the file API (0 = none).
	DiskBytes int64 `json:"disk_bytes,omitempty"`
	// Rlimits are applied to every process the agent starts (with
	// prlimit, right after the process is created), not to the agent.
	Rlimits []Rlimit `json:"rlimits,omitempty"`
	// Proxy, when set, is a loopback address inside the sandbox
	// ("127.0.0.1:3128") where the agent accepts connections for the
	// egress proxy and carries each to the client (see Client.Egress).
	Proxy string `json:"proxy,omitempty"`
	// ProxyHandoff says the client takes a proxy connection's socket
	// itself, as a descriptor sent over the stream (FrameConnHandoff),
	// instead of its bytes in Conn* frames: the stream is a unix socket
	// and the client reads it with recvmsg.
	ProxyHandoff bool `json:"proxy_handoff,omitempty"`
	// ProxyHandoffPath, when set, is a unix socket inside the sandbox
	// where the client takes handed-over connections (ConnHandoff frames
	// with their descriptors) when the stream itself cannot carry them
	// (a container's attach stream).
	ProxyHandoffPath string `json:"proxy_handoff_path,omitempty"`
}

// Rlimit is one resource limit for the agent's children.
type Rlimit struct {
	Resource int    `json:"resource"` // RLIMIT_* number
	Name     string `json:"name"`     // for messages, e.g. "RLIMIT_CPU"
	Soft     uint64 `json:"soft"`
	Hard     uint64 `json:"hard"`
}

// HelloReply is the agent's answer to Hello.
type HelloReply struct {
	Version  int    `json:"version"`
	PID      int    `json:"pid"`
	PID1     bool   `json:"pid1"`
	UID      int    `json:"uid"`
	Python   string `json:"python,omitempty"` // path of python3 on the sandbox PATH, "" if none
	Bash     string `json:"bash,omitempty"`   // path of bash, "" if none
	Hostname string `json:"hostname,omitempty"`
	// Proxy is the address the agent listens on for the egress proxy, ""
	// when Hello asked for none (or the agent predates egress).
	Proxy string `json:"proxy,omitempty"`
	// ProxyHandoff: the agent hands its proxy connections' sockets to the
	// client (Hello.ProxyHandoff or ProxyHandoffPath) instead of carrying
	// their bytes.
	ProxyHandoff bool `json:"proxy_handoff,omitempty"`
}

// Request is one operation. Args holds the op's argument struct.
type Request struct {
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args,omitempty"`
}

// Reply ends a request: either Result or Error is set.
type Reply struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *WireError      `json:"error,omitempty"`
}

// WireError is an error as it crosses the stream: a stable code from the
// driver's list (driver.Codes, the one list of error codes) and a message
// for people and models. Package sandbox passes the code on as is.
type WireError struct {
	Code    driver.Code
	Message string
}

// Error returns the message.
func (e *WireError) Error() string { return e.Message }

// codePrefix is left out of a code on the stream: protocol version 2
// sends "NOT_FOUND" for driver.CodeNotFound. Mapping it here, the one
// place, keeps the bytes of the protocol (and agents already built)
// unchanged while every Go caller speaks the driver's codes.
const codePrefix = "SBX_"

type wireErrorJSON struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// MarshalJSON writes the error as the protocol has it: the code without
// its "SBX_" prefix.
func (e WireError) MarshalJSON() ([]byte, error) {
	return json.Marshal(wireErrorJSON{Code: strings.TrimPrefix(string(e.Code), codePrefix), Message: e.Message})
}

// UnmarshalJSON reads an error from the stream, restoring the code's
// prefix. A code the driver's list lacks (an agent of another version)
// stays as sent; package sandbox reports it as such.
func (e *WireError) UnmarshalJSON(b []byte) error {
	var w wireErrorJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	e.Code, e.Message = driver.Code(w.Code), w.Message
	if c := driver.Code(codePrefix + w.Code); c.Known() {
		e.Code = c
	}
	return nil
}

// The driver's codes the agent produces, under the names the server's
// code uses (wire.CodeNotFound). They are the driver's constants, not a
// list of their own: values and meanings live in driver.Codes.
const (
	CodeNotFound        = driver.CodeNotFound
	CodeExists          = driver.CodeExists
	CodePathEscape      = driver.CodePathEscape
	CodeQuota           = driver.CodeQuota
	CodeNoSpace         = driver.CodeNoSpace
	CodeInvalidArgument = driver.CodeInvalidArgument
	CodeNotDir          = driver.CodeNotDir
	CodeIsDir           = driver.CodeIsDir
	CodeBinary          = driver.CodeBinary
	CodeTooLarge        = driver.CodeTooLarge
	CodePermission      = driver.CodePermission
	CodeNoMatch         = driver.CodeNoMatch
	CodeAmbiguous       = driver.CodeAmbiguous
	CodeTimeout         = driver.CodeTimeout
	CodeCanceled        = driver.CodeCanceled
	CodeExec            = driver.CodeExec
	CodeBusy            = driver.CodeBusy
	CodeInternal        = driver.CodeInternal
)

// Errorf returns a WireError with code and a formatted message.
func Errorf(code driver.Code, format string, args ...any) *WireError {
	return &WireError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Event is an interim message about a request (e.g. its process started).
type Event struct {
	Kind string `json:"kind"` // "started"
	PID  int    `json:"pid,omitempty"`
}

// SignalRequest asks the agent to signal a request's process.
type SignalRequest struct {
	Signal int `json:"signal"`
	// Foreground signals the foreground process group of the request's
	// pty instead of the process itself (like a key typed at a terminal).
	Foreground bool `json:"foreground,omitempty"`
	// Group signals the process's whole process group; SIGKILL also
	// reaches its descendants outside the group and, on a pty, its session.
	Group bool `json:"group,omitempty"`
}

// ExecRequest starts a process (op "exec").
type ExecRequest struct {
	Args []string `json:"args"`
	// Dir is relative to the workspace, or absolute. Empty = workspace.
	Dir string `json:"dir,omitempty"`
	// Env entries (KEY=VALUE) override the base environment.
	Env []string `json:"env,omitempty"`
	// Stdin keeps the process's stdin open for Stdin frames; otherwise it
	// reads /dev/null.
	Stdin bool `json:"stdin,omitempty"`
	// Pty runs the process on a new pseudo-terminal (stdout carries the
	// terminal's output; stderr is merged into it).
	Pty  bool   `json:"pty,omitempty"`
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
	// TimeoutMs kills the process tree after this long (0 = none; the
	// client always sets one for commands).
	TimeoutMs int64 `json:"timeout_ms,omitempty"`
	// MaxOutput caps the bytes kept of each of stdout and stderr: the
	// first half is streamed as produced, the last bytes are returned in
	// the reply, the middle is dropped and counted. 0 = stream everything.
	// The agent caps it at 8 MiB, so that the tails fit in one reply.
	MaxOutput int `json:"max_output,omitempty"`
	// Job starts a background job: the reply comes at once with its id,
	// and output goes to a ring buffer of RingBytes read by job ops.
	Job       bool `json:"job,omitempty"`
	RingBytes int  `json:"ring_bytes,omitempty"`
	// Events asks for a "started" Event once the process runs (it costs a
	// frame, so a plain command run goes without).
	Events bool `json:"events,omitempty"`
	// OutputFile, when set, is a workspace path the agent writes every
	// byte of output to as it is read (stdout and stderr interleaved in
	// arrival order), whatever MaxOutput keeps. Parent dirs are created.
	OutputFile string `json:"output_file,omitempty"`
	// OutputFileLimit caps that file (0 = DefaultOutputFileLimit); bytes
	// past it are counted, not written.
	OutputFileLimit int64 `json:"output_file_limit,omitempty"`
}

// OutputFileReport says what became of an ExecRequest.OutputFile.
type OutputFileReport struct {
	// OutputFile is the path written, as requested ("" when none was).
	OutputFile string `json:"output_file,omitempty"`
	// OutputFileBytes counts the bytes in the file.
	OutputFileBytes int64 `json:"output_file_bytes,omitempty"`
	// OutputFileCut counts bytes not written because of the limit.
	OutputFileCut int64 `json:"output_file_cut,omitempty"`
	// OutputFileError is set when writing failed: the file then holds
	// only the first OutputFileBytes bytes.
	OutputFileError string `json:"output_file_error,omitempty"`
}

// ExecReply is the end of an exec request.
type ExecReply struct {
	PID        int    `json:"pid"`
	ExitCode   int    `json:"exit_code"`
	Signal     string `json:"signal,omitempty"`
	DurationNs int64  `json:"duration_ns"`
	TimedOut   bool   `json:"timed_out,omitempty"`
	Canceled   bool   `json:"canceled,omitempty"`
	// StdoutTail and StderrTail are the bytes kept after the streamed head
	// when MaxOutput is set; Dropped counts the bytes cut between them.
	StdoutTail    []byte `json:"stdout_tail,omitempty"`
	StderrTail    []byte `json:"stderr_tail,omitempty"`
	StdoutDropped int64  `json:"stdout_dropped,omitempty"`
	StderrDropped int64  `json:"stderr_dropped,omitempty"`
	// JobID is set in the immediate reply of a job start.
	JobID string `json:"job_id,omitempty"`
	// LeftRunning lists processes the command left behind that still
	// held its stdout or stderr open when it exited: the agent stopped
	// reading shortly after the exit, so what they print later is not
	// captured. Everything read up to then is in the output or counted.
	LeftRunning []int `json:"left_running,omitempty"`
	// Killed counts the processes besides the main one that a timeout or
	// cancel signalled: the command's tree and everything carrying its tag
	// (daemons that left the tree included).
	Killed int `json:"killed,omitempty"`
	// Survivors lists the command's processes still alive after that kill
	// (none normally).
	Survivors []int `json:"survivors,omitempty"`
	OutputFileReport
}

// JobRef names a job (ops job.status, job.wait, job.remove).
type JobRef struct {
	ID string `json:"id"`
}

// JobOutputRequest reads a job's output from a cursor (op job.output).
type JobOutputRequest struct {
	ID    string `json:"id"`
	Since int64  `json:"since"`
	Max   int    `json:"max,omitempty"`
}

// JobOutput is a slice of a job's combined output.
type JobOutput struct {
	Data []byte `json:"data"`
	// Next is the cursor to pass as Since next time.
	Next int64 `json:"next"`
	// Dropped counts bytes after Since that the ring buffer no longer
	// holds (they were overwritten before being read).
	Dropped int64     `json:"dropped,omitempty"`
	Status  JobStatus `json:"status"`
}

// JobStatus describes one job.
type JobStatus struct {
	ID        string   `json:"id"`
	Args      []string `json:"args"`
	PID       int      `json:"pid"`
	Running   bool     `json:"running"`
	ExitCode  int      `json:"exit_code"`
	Signal    string   `json:"signal,omitempty"`
	StartedNs int64    `json:"started_ns"`
	EndedNs   int64    `json:"ended_ns,omitempty"`
	// Written counts all output bytes the job produced.
	Written int64 `json:"written"`
	// LeftRunning: see ExecReply (set once the job ended).
	LeftRunning []int `json:"left_running,omitempty"`
	// The job's OutputFile so far (final once the job ended).
	OutputFileReport
}

// JobSignalRequest signals a job's process tree (op job.kill).
type JobSignalRequest struct {
	ID     string `json:"id"`
	Signal int    `json:"signal"`
}

// JobStdinRequest writes to a job's stdin (op job.stdin).
type JobStdinRequest struct {
	ID    string `json:"id"`
	Data  []byte `json:"data,omitempty"`
	Close bool   `json:"close,omitempty"`
}
