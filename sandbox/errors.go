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

// Code is a stable error code, e.g. SBX_TIMEOUT. The list is owned by
// sandbox/driver, the contract every backend and the in-sandbox agent share;
// this package re-exports it. Codes never change meaning; new ones may be
// added. docs/errors.md lists them all (generated from driver.Codes).
type Code = driver.Code

// The error codes (see ErrorCodes for what each means).
const (
	CodeTimeout              = driver.CodeTimeout
	CodeCanceled             = driver.CodeCanceled
	CodeNotFound             = driver.CodeNotFound
	CodeExists               = driver.CodeExists
	CodePathEscape           = driver.CodePathEscape
	CodeQuota                = driver.CodeQuota
	CodeNoSpace              = driver.CodeNoSpace
	CodeInvalidArgument      = driver.CodeInvalidArgument
	CodeNotDir               = driver.CodeNotDir
	CodeIsDir                = driver.CodeIsDir
	CodeBinary               = driver.CodeBinary
	CodeTooLarge             = driver.CodeTooLarge
	CodePermission           = driver.CodePermission
	CodeNoMatch              = driver.CodeNoMatch
	CodeAmbiguous            = driver.CodeAmbiguous
	CodeExec                 = driver.CodeExec
	CodeClosed               = driver.CodeClosed
	CodeDead                 = driver.CodeDead
	CodePaused               = driver.CodePaused
	CodeBusy                 = driver.CodeBusy
	CodeEnded                = driver.CodeEnded
	CodeUnavailable          = driver.CodeUnavailable
	CodeUnsupported          = driver.CodeUnsupported
	CodeIsolationUnavailable = driver.CodeIsolationUnavailable
	CodeBackend              = driver.CodeBackend
	CodeInternal             = driver.CodeInternal
)

// CodeInfo documents one error code: its meaning and what to do about it.
type CodeInfo = driver.CodeInfo

// ErrorCodes lists every error code with its meaning, in a stable order.
func ErrorCodes() []CodeInfo { return driver.Codes() }

// Error is every error this package returns for a failed operation.
type Error struct {
	Code    Code   // stable, for programs and models; see ErrorCodes
	Op      string // e.g. "Files.Read"
	Message string // what happened and what to do
	Err     error  // underlying cause, may be nil

	// errShown: Message already says what Err says (in other words), so
	// Error does not repeat it.
	errShown bool
}

func (e *Error) Error() string {
	s := string(e.Code)
	if e.Op != "" {
		s += " " + e.Op
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Err != nil && !e.errShown && (e.Message == "" || !containsErr(e.Message, e.Err)) {
		s += ": " + e.Err.Error()
	}
	return s
}

// deathCause returns what err says beyond "sandbox agent is gone" (every
// layer that wrapped agent.ErrDead with "%w: why" adds a prefix), or "".
func deathCause(err error) string {
	msg := err.Error()
	for {
		rest, ok := strings.CutPrefix(msg, agent.ErrDead.Error())
		if !ok {
			return msg
		}
		msg = strings.TrimLeft(rest, ": ")
		if msg == "" || msg == "EOF" || msg == "unexpected EOF" {
			return "" // the stream ended: that says nothing about why
		}
	}
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
	ErrUnsupported          = &Error{Code: CodeUnsupported}
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
		if !we.Code.Known() {
			// An agent of another sandboxkit version: its code cannot
			// be matched, so say so instead of passing it on.
			return &Error{Code: CodeInternal, Op: op, Message: fmt.Sprintf("the sandbox's agent returned the unknown error code %q (is it the same sandboxkit version as this program?): %s", we.Code, we.Message)}
		}
		return &Error{Code: we.Code, Op: op, Message: we.Message}
	}
	var de *driver.Error
	if errors.As(err, &de) {
		if !de.Code.Known() {
			// A backend built against another list, or a typo: the
			// caller could not match the code, so say so instead of
			// passing it on.
			return &Error{Code: CodeInternal, Op: op, Message: fmt.Sprintf("the backend returned the unknown error code %q (a bug in the backend; the codes are listed by driver.Codes): %s", de.Code, de.Message), Err: de.Err}
		}
		return &Error{Code: de.Code, Op: op, Message: de.Message, Err: de.Err}
	}
	switch {
	case errors.Is(err, agent.ErrClosed):
		return &Error{Code: CodeClosed, Op: op, Message: "the sandbox was closed (by Close or its TTL) while the call ran; create a new sandbox", Err: err}
	case errors.Is(err, agent.ErrDead):
		// Why it died (the OOM killer, a crash, thread exhaustion: what
		// the backend read from the stream's end) comes first; after the
		// generic advice a model reading a tool result often missed it.
		if cause := deathCause(err); cause != "" {
			if !strings.Contains(cause, "create a new sandbox") { // a backend's cause may advise already
				cause += "; create a new sandbox"
			}
			return &Error{Code: CodeDead, Op: op, Message: "the sandbox's agent is gone: " + cause, Err: err, errShown: true}
		}
		return &Error{Code: CodeDead, Op: op, Message: "the sandbox's agent is gone (the sandbox died or was killed); create a new sandbox", Err: err, errShown: true}
	case errors.Is(err, agent.ErrStalled):
		return &Error{Code: CodeTimeout, Op: op, Message: "the sandbox's agent has not read anything for a while (it is stopped, frozen or hung), so the call was not sent: try again later, or close the sandbox and create a new one", Err: err}
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Code: CodeTimeout, Op: op, Message: "the caller's context deadline passed", Err: err}
	case errors.Is(err, context.Canceled):
		return &Error{Code: CodeCanceled, Op: op, Message: "cancelled by the caller", Err: err}
	case errors.Is(err, wire.ErrProtocol):
		return &Error{Code: CodeDead, Op: op, Message: "the sandbox's agent sent a malformed message; the sandbox is no longer trusted", Err: err}
	}
	return &Error{Code: CodeInternal, Op: op, Message: err.Error(), Err: err}
}
