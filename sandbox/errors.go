package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sandboxkit/sandboxkit/sandbox/agent"
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

//go:generate go test -run TestErrorDocs -update .

// Code is a stable error code. Codes never change meaning; new ones may be
// added. docs/errors.md lists them all (generated from codeTable).
type Code string

// The error codes.
const (
	CodeTimeout              Code = "SBX_TIMEOUT"
	CodeCanceled             Code = "SBX_CANCELED"
	CodeNotFound             Code = "SBX_NOT_FOUND"
	CodeExists               Code = "SBX_EXISTS"
	CodePathEscape           Code = "SBX_PATH_ESCAPE"
	CodeQuota                Code = "SBX_QUOTA"
	CodeNoSpace              Code = "SBX_NO_SPACE"
	CodeInvalidArgument      Code = "SBX_INVALID_ARGUMENT"
	CodeNotDir               Code = "SBX_NOT_DIR"
	CodeIsDir                Code = "SBX_IS_DIR"
	CodeBinary               Code = "SBX_BINARY"
	CodeTooLarge             Code = "SBX_TOO_LARGE"
	CodePermission           Code = "SBX_PERMISSION"
	CodeNoMatch              Code = "SBX_NO_MATCH"
	CodeAmbiguous            Code = "SBX_AMBIGUOUS"
	CodeExec                 Code = "SBX_EXEC"
	CodeClosed               Code = "SBX_CLOSED"
	CodeDead                 Code = "SBX_DEAD"
	CodePaused               Code = "SBX_PAUSED"
	CodeBusy                 Code = "SBX_BUSY"
	CodeEnded                Code = "SBX_ENDED"
	CodeUnavailable          Code = "SBX_UNAVAILABLE"
	CodeIsolationUnavailable Code = "SBX_ISOLATION_UNAVAILABLE"
	CodeBackend              Code = "SBX_BACKEND"
	CodeInternal             Code = "SBX_INTERNAL"
)

// codeTable documents every code; docs/errors.md is generated from it and
// a test fails when the two differ.
var codeTable = []struct {
	Code    Code
	Meaning string
	Action  string
}{
	{CodeTimeout, "A command, job wait, Python run or session call ran past its timeout. Partial output is returned with the error.", "Raise the call's timeout (up to Limits.MaxTimeout), or run long work as a background job."},
	{CodeCanceled, "The caller's context was cancelled; the operation's process was killed.", "None: this is the caller's own decision."},
	{CodeNotFound, "A file, directory, job, context, session or program does not exist.", "Check the name; list what exists."},
	{CodeExists, "The destination already exists.", "Pass overwrite, or choose another name."},
	{CodePathEscape, "A path leads outside the workspace (\"..\", an absolute path elsewhere, or a symbolic link pointing out).", "Use a path inside the workspace."},
	{CodeQuota, "A write would pass the file-size limit or the workspace's disk quota.", "Delete files, write less, or raise Limits.FileSizeBytes / Limits.DiskBytes."},
	{CodeNoSpace, "The file system holding the workspace is full (the host's disk, not a quota of the sandbox). A file being replaced is left unchanged: replacing needs room for the old and new copies.", "Delete files, write less, or free space on the host."},
	{CodeInvalidArgument, "An argument is malformed or out of range.", "Fix the argument the message names."},
	{CodeNotDir, "A path used as a directory is not one.", "Check the path."},
	{CodeIsDir, "A path used as a file is a directory.", "List it, or give a file inside it."},
	{CodeBinary, "A text operation met a binary file.", "Use Files.ReadFile / CopyOut for bytes."},
	{CodeTooLarge, "The file or reply is larger than a limit (the read limit, 64 MiB for Edit, 16 MiB for one reply).", "Read a range of lines, narrow the search, or CopyOut."},
	{CodePermission, "The operating system denied the operation (read-only file system, file mode).", "Write inside the workspace or /tmp; check the file's mode."},
	{CodeNoMatch, "Edit: the old text does not occur in the file.", "Read the file and copy the exact text, whitespace included."},
	{CodeAmbiguous, "Edit: the old text occurs more than once.", "Include more context to make it unique, or ask for replace-all."},
	{CodeExec, "A process could not be started (or a limit could not be applied to it).", "Check the program name and the sandbox PATH."},
	{CodeClosed, "The sandbox was closed (by Close or its TTL).", "Create a new sandbox."},
	{CodeDead, "The sandbox's agent or boundary died unexpectedly; every pending and later call fails.", "Create a new sandbox; check Info and the host's logs for the cause (OOM kill, killed container)."},
	{CodePaused, "The sandbox is paused.", "Call Resume first."},
	{CodeBusy, "A bash session is still running a command, or the sandbox already runs as many commands at once as its open-file limit leaves room for.", "Send input or keys to the session, wait for it, or interrupt it with Ctrl-C; or wait for running commands to finish (stop background jobs you no longer need) and run the command again."},
	{CodeEnded, "A bash session or Python context has ended (exit, crash).", "Open a new session or restart the context."},
	{CodeUnavailable, "A feature needs something the sandbox lacks (python3, bash).", "Install it in the image, or point the sandbox at it (WithPython)."},
	{CodeIsolationUnavailable, "The backend cannot provide the isolation tier or a control that was asked for.", "Run `sandboxkit doctor`; allow a weaker tier by name, or use another backend."},
	{CodeBackend, "The backend failed (Docker engine down, image missing, no resources).", "Read the message; fix the engine or the image."},
	{CodeInternal, "A bug in sandboxkit.", "Report it with the message."},
}

// CodeInfo documents one error code.
type CodeInfo struct {
	Code    Code   // the code, e.g. SBX_TIMEOUT
	Meaning string // what it means
	Action  string // what a caller or model can do about it
}

// ErrorCodes lists every error code with its meaning, in a stable order.
func ErrorCodes() []CodeInfo {
	out := make([]CodeInfo, len(codeTable))
	for i, c := range codeTable {
		out[i] = CodeInfo{Code: c.Code, Meaning: c.Meaning, Action: c.Action}
	}
	return out
}

// Error is every error this package returns for a failed operation.
type Error struct {
	Code    Code   // stable, for programs and models; see ErrorCodes
	Op      string // e.g. "Files.Read"
	Message string // what happened and what to do
	Err     error  // underlying cause, may be nil
}

func (e *Error) Error() string {
	s := string(e.Code)
	if e.Op != "" {
		s += " " + e.Op
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Err != nil && (e.Message == "" || !containsErr(e.Message, e.Err)) {
		s += ": " + e.Err.Error()
	}
	return s
}

func containsErr(msg string, err error) bool { return strings.Contains(msg, err.Error()) }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is matches sentinels by code: errors.Is(err, sandbox.ErrTimeout).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && t.Op == "" && t.Message == ""
}

// Fatal reports whether the sandbox itself is unusable (closed or dead),
// as opposed to one call failing. Tool dispatchers use it to tell
// infrastructure failures from mistakes a model can correct.
func (e *Error) Fatal() bool { return e.Code == CodeClosed || e.Code == CodeDead }

// Sentinels for errors.Is, one per code.
var (
	ErrTimeout              = &Error{Code: CodeTimeout}
	ErrCanceled             = &Error{Code: CodeCanceled}
	ErrNotFound             = &Error{Code: CodeNotFound}
	ErrExists               = &Error{Code: CodeExists}
	ErrPathEscape           = &Error{Code: CodePathEscape}
	ErrQuota                = &Error{Code: CodeQuota}
	ErrNoSpace              = &Error{Code: CodeNoSpace}
	ErrInvalidArgument      = &Error{Code: CodeInvalidArgument}
	ErrNotDir               = &Error{Code: CodeNotDir}
	ErrIsDir                = &Error{Code: CodeIsDir}
	ErrBinary               = &Error{Code: CodeBinary}
	ErrTooLarge             = &Error{Code: CodeTooLarge}
	ErrPermission           = &Error{Code: CodePermission}
	ErrNoMatch              = &Error{Code: CodeNoMatch}
	ErrAmbiguous            = &Error{Code: CodeAmbiguous}
	ErrExec                 = &Error{Code: CodeExec}
	ErrClosed               = &Error{Code: CodeClosed}
	ErrDead                 = &Error{Code: CodeDead}
	ErrPaused               = &Error{Code: CodePaused}
	ErrBusy                 = &Error{Code: CodeBusy}
	ErrEnded                = &Error{Code: CodeEnded}
	ErrUnavailable          = &Error{Code: CodeUnavailable}
	ErrIsolationUnavailable = &Error{Code: CodeIsolationUnavailable}
	ErrBackend              = &Error{Code: CodeBackend}
	ErrInternal             = &Error{Code: CodeInternal}
)

// CodeOf returns err's code, or "" when err is not a sandbox error.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func newError(code Code, op, format string, args ...any) *Error {
	return &Error{Code: code, Op: op, Message: fmt.Sprintf(format, args...)}
}

// wrapErr converts errors from the agent client, the driver and contexts
// into *Error.
func wrapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	var se *Error
	if errors.As(err, &se) {
		if se.Op == "" {
			c := *se
			c.Op = op
			return &c
		}
		return err
	}
	var we *wire.WireError
	if errors.As(err, &we) {
		return &Error{Code: Code("SBX_" + we.Code), Op: op, Message: we.Message}
	}
	var de *driver.Error
	if errors.As(err, &de) {
		return &Error{Code: Code("SBX_" + de.Code), Op: op, Message: de.Message, Err: de.Err}
	}
	switch {
	case errors.Is(err, agent.ErrClosed):
		return &Error{Code: CodeClosed, Op: op, Message: "the sandbox was closed (by Close or its TTL) while the call ran; create a new sandbox", Err: err}
	case errors.Is(err, agent.ErrDead):
		return &Error{Code: CodeDead, Op: op, Message: "the sandbox's agent is gone (the sandbox died or was killed); create a new sandbox", Err: err}
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Code: CodeTimeout, Op: op, Message: "the caller's context deadline passed", Err: err}
	case errors.Is(err, context.Canceled):
		return &Error{Code: CodeCanceled, Op: op, Message: "cancelled by the caller", Err: err}
	case errors.Is(err, wire.ErrProtocol):
		return &Error{Code: CodeDead, Op: op, Message: "the sandbox's agent sent a malformed message; the sandbox is no longer trusted", Err: err}
	}
	return &Error{Code: CodeInternal, Op: op, Message: err.Error(), Err: err}
}
