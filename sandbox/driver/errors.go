package driver

//go:generate go test -run TestErrorDocs -update .

// Code is a stable error code, such as "SBX_TIMEOUT". This package holds
// the one list of codes: backends return them in *Error, the agent sends
// them over its stream, and package sandbox re-exports them for users.
// Codes never change meaning; new ones may be added. docs/errors.md lists
// them all, generated from Codes by `go generate ./sandbox/driver`.
type Code string

// The error codes. Each is documented in Codes.
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
	CodeUnsupported          Code = "SBX_UNSUPPORTED"
	CodeIsolationUnavailable Code = "SBX_ISOLATION_UNAVAILABLE"
	CodeBackend              Code = "SBX_BACKEND"
	CodeInternal             Code = "SBX_INTERNAL"
)

// CodeInfo documents one error code.
type CodeInfo struct {
	Code    Code   // the code, e.g. SBX_TIMEOUT
	Meaning string // what it means
	Action  string // what a caller or model can do about it
}

// codes documents every code, in the order of docs/errors.md.
var codes = []CodeInfo{
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
	{CodeBusy, "A bash session is still running a command, or the sandbox already runs as many commands at once as its open-file limit leaves room for, or as many processes as its process limit allows.", "Send input or keys to the session, wait for it, or interrupt it with Ctrl-C; or wait for running commands to finish (stop background jobs and processes you no longer need) and run the command again."},
	{CodeEnded, "A bash session or Python context has ended (exit, crash).", "Open a new session or restart the context."},
	{CodeUnavailable, "A feature needs something the sandbox lacks (python3, bash).", "Install it in the image, or point the sandbox at it (WithPython)."},
	{CodeUnsupported, "The backend does not implement an optional operation (Pause and Resume on a backend that cannot freeze its processes).", "Do without the operation, or use a backend that has it (local, docker and kubernetes pause)."},
	{CodeIsolationUnavailable, "The backend cannot provide the isolation tier or a control that was asked for.", "Run `sandboxkit doctor`; allow a weaker tier by name, or use another backend."},
	{CodeBackend, "The backend failed (Docker engine down, image missing, no resources).", "Read the message; fix the engine or the image."},
	{CodeInternal, "A bug in sandboxkit.", "Report it with the message."},
}

// Codes lists every error code with its meaning, in a stable order.
func Codes() []CodeInfo { return append([]CodeInfo(nil), codes...) }

// Known reports whether c is in the list (Codes).
func (c Code) Known() bool {
	for _, ci := range codes {
		if ci.Code == c {
			return true
		}
	}
	return false
}

// Error is a backend failure with a stable code from the list (Codes),
// e.g. CodeIsolationUnavailable, CodeDead, CodeBackend. Package sandbox
// converts it to its own error type, keeping the code.
type Error struct {
	Code    Code
	Message string // what happened and what to do about it
	Err     error  // underlying cause, may be nil
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// Errorf is a convenience for backends building an *Error.
func Errorf(code Code, cause error, message string) *Error {
	return &Error{Code: code, Message: message, Err: cause}
}
