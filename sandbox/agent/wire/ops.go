package wire

// Op is one operation of the protocol: its name on the wire (Request.Op),
// the type of its arguments (A, Request.Args) and of its result (R,
// Reply.Result). The table below is the protocol's list of operations;
// the server serves each from one entry of its own table keyed by these
// values, and a client decodes each result as R.
type Op[A, R any] struct{ Name string }

// String is the operation's name.
func (o Op[A, R]) String() string { return o.Name }

// The operations. A frame-level detail each adds to the request/reply
// exchange is noted: Stdout/Stderr frames (exec), Stdin frames in (exec
// with Stdin, fs.copyin: a tar stream), Stdout frames out (fs.copyout: a
// tar stream), a Blob frame before the reply (fs.read).
var (
	OpPing = Op[struct{}, struct{}]{"ping"}

	OpExec      = Op[ExecRequest, ExecReply]{"exec"} // with Job: returns at once, JobID set
	OpJobOutput = Op[JobOutputRequest, JobOutput]{"job.output"}
	OpJobStatus = Op[JobRef, JobStatus]{"job.status"}
	OpJobWait   = Op[JobRef, JobStatus]{"job.wait"}
	OpJobKill   = Op[JobSignalRequest, struct{}]{"job.kill"}
	OpJobStdin  = Op[JobStdinRequest, struct{}]{"job.stdin"}
	OpJobList   = Op[struct{}, []JobStatus]{"job.list"}
	OpJobRemove = Op[JobRef, struct{}]{"job.remove"}

	OpFSRead    = Op[FSReadRequest, FSReadReply]{"fs.read"}
	OpFSWrite   = Op[FSWriteRequest, Entry]{"fs.write"}
	OpFSEdit    = Op[FSEditRequest, FSEditReply]{"fs.edit"}
	OpFSStat    = Op[FSPathRequest, Entry]{"fs.stat"}
	OpFSList    = Op[FSListRequest, FSListReply]{"fs.list"}
	OpFSMkdir   = Op[FSPathRequest, Entry]{"fs.mkdir"}
	OpFSMove    = Op[FSMoveRequest, Entry]{"fs.move"}
	OpFSCopy    = Op[FSMoveRequest, Entry]{"fs.copy"}
	OpFSRemove  = Op[FSPathRequest, struct{}]{"fs.remove"}
	OpFSChmod   = Op[FSChmodRequest, Entry]{"fs.chmod"}
	OpFSSearch  = Op[FSSearchRequest, FSSearchReply]{"fs.search"}
	OpFSGlob    = Op[FSGlobRequest, FSGlobReply]{"fs.glob"}
	OpFSCopyIn  = Op[FSPathRequest, FSCopyReply]{"fs.copyin"}
	OpFSCopyOut = Op[FSPathRequest, FSCopyReply]{"fs.copyout"}
)
