package server

import (
	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// operation is how the server serves one protocol operation: one entry of
// the table below, built from the operation's wire.Op so that its
// arguments are decoded (and refused with INVALID_ARGUMENT) in one place.
type operation struct {
	// run serves a request on its own goroutine.
	run func(s *server, r *request, req wire.Request) (any, *wire.WireError)
	// inline, when set, may serve a request on the read loop, saving the
	// hand-off to a goroutine for a request that finishes at once. It
	// returns answered false when it cannot (then run serves it); it must
	// never block.
	inline func(s *server, req wire.Request) (result any, werr *wire.WireError, blob []byte, answered bool)
}

// serve builds the entry of op from a handler taking op's decoded
// arguments.
func serve[A, R any](op wire.Op[A, R], h func(s *server, r *request, a A) (any, *wire.WireError)) operation {
	return operation{run: func(s *server, r *request, req wire.Request) (any, *wire.WireError) {
		a, e := decodeArgs[A](req)
		if e != nil {
			return nil, e
		}
		return h(s, r, a)
	}}
}

// serveInline is serve with an inline path (see operation.inline).
func serveInline[A, R any](op wire.Op[A, R], h func(s *server, r *request, a A) (any, *wire.WireError),
	inline func(s *server, a A) (result any, werr *wire.WireError, blob []byte, answered bool)) operation {
	o := serve(op, h)
	o.inline = func(s *server, req wire.Request) (any, *wire.WireError, []byte, bool) {
		a, e := decodeArgs[A](req)
		if e != nil {
			return nil, e, nil, true
		}
		return inline(s, a)
	}
	return o
}

// operations is the table of every operation the server serves, keyed by
// its name on the wire.
var operations map[string]operation

func init() {
	operations = map[string]operation{}
	add := func(name string, o operation) { operations[name] = o }

	add(wire.OpPing.Name, serveInline(wire.OpPing,
		func(*server, *request, struct{}) (any, *wire.WireError) { return struct{}{}, nil },
		func(*server, struct{}) (any, *wire.WireError, []byte, bool) { return struct{}{}, nil, nil, true }))

	add(wire.OpExec.Name, serve(wire.OpExec, func(s *server, r *request, a wire.ExecRequest) (any, *wire.WireError) {
		if a.Job {
			return s.startJob(a)
		}
		return s.runExec(r, a)
	}))
	add(wire.OpJobOutput.Name, serve(wire.OpJobOutput, func(s *server, _ *request, a wire.JobOutputRequest) (any, *wire.WireError) {
		return s.jobs.output(a)
	}))
	add(wire.OpJobStatus.Name, serve(wire.OpJobStatus, func(s *server, _ *request, a wire.JobRef) (any, *wire.WireError) {
		return s.jobs.status(a.ID)
	}))
	add(wire.OpJobWait.Name, serve(wire.OpJobWait, func(s *server, r *request, a wire.JobRef) (any, *wire.WireError) {
		return s.jobs.wait(r.ctx, a.ID)
	}))
	add(wire.OpJobKill.Name, serve(wire.OpJobKill, func(s *server, _ *request, a wire.JobSignalRequest) (any, *wire.WireError) {
		return s.jobs.signal(a.ID, a.Signal)
	}))
	add(wire.OpJobStdin.Name, serve(wire.OpJobStdin, func(s *server, _ *request, a wire.JobStdinRequest) (any, *wire.WireError) {
		return s.jobs.stdin(a)
	}))
	add(wire.OpJobList.Name, serve(wire.OpJobList, func(s *server, _ *request, _ struct{}) (any, *wire.WireError) {
		return s.jobs.list(), nil
	}))
	add(wire.OpJobRemove.Name, serve(wire.OpJobRemove, func(s *server, _ *request, a wire.JobRef) (any, *wire.WireError) {
		return s.jobs.remove(a.ID)
	}))

	add(wire.OpFSRead.Name, serveInline(wire.OpFSRead,
		func(s *server, r *request, a wire.FSReadRequest) (any, *wire.WireError) {
			res, e := s.ws.read(a)
			if rep, ok := res.(wire.FSReadReply); ok && e == nil {
				res, r.blob = rep.ToBlob()
			}
			return res, e
		},
		func(s *server, a wire.FSReadRequest) (any, *wire.WireError, []byte, bool) {
			res, done, e := s.ws.readUpTo(a, inlineReadMax)
			if !done {
				return nil, nil, nil, false
			}
			var blob []byte
			if rep, ok := res.(wire.FSReadReply); ok && e == nil {
				res, blob = rep.ToBlob()
			}
			return res, e, blob, true
		}))
	add(wire.OpFSStat.Name, serveInline(wire.OpFSStat,
		func(s *server, _ *request, a wire.FSPathRequest) (any, *wire.WireError) { return s.ws.stat(a.Path) },
		func(s *server, a wire.FSPathRequest) (any, *wire.WireError, []byte, bool) {
			res, e := s.ws.stat(a.Path)
			return res, e, nil, true
		}))
	add(wire.OpFSWrite.Name, serve(wire.OpFSWrite, func(s *server, _ *request, a wire.FSWriteRequest) (any, *wire.WireError) {
		return s.ws.write(a)
	}))
	add(wire.OpFSEdit.Name, serve(wire.OpFSEdit, func(s *server, _ *request, a wire.FSEditRequest) (any, *wire.WireError) {
		return s.ws.edit(a)
	}))
	add(wire.OpFSList.Name, serve(wire.OpFSList, func(s *server, _ *request, a wire.FSListRequest) (any, *wire.WireError) {
		return s.ws.list(a)
	}))
	add(wire.OpFSMkdir.Name, serve(wire.OpFSMkdir, func(s *server, _ *request, a wire.FSPathRequest) (any, *wire.WireError) {
		return s.ws.mkdir(a.Path)
	}))
	add(wire.OpFSMove.Name, serve(wire.OpFSMove, func(s *server, _ *request, a wire.FSMoveRequest) (any, *wire.WireError) {
		return s.ws.move(a)
	}))
	add(wire.OpFSCopy.Name, serve(wire.OpFSCopy, func(s *server, _ *request, a wire.FSMoveRequest) (any, *wire.WireError) {
		return s.ws.copy(a)
	}))
	add(wire.OpFSRemove.Name, serve(wire.OpFSRemove, func(s *server, _ *request, a wire.FSPathRequest) (any, *wire.WireError) {
		return s.ws.remove(a)
	}))
	add(wire.OpFSChmod.Name, serve(wire.OpFSChmod, func(s *server, _ *request, a wire.FSChmodRequest) (any, *wire.WireError) {
		return s.ws.chmod(a)
	}))
	add(wire.OpFSSearch.Name, serve(wire.OpFSSearch, func(s *server, r *request, a wire.FSSearchRequest) (any, *wire.WireError) {
		return s.ws.search(r.ctx, a)
	}))
	add(wire.OpFSGlob.Name, serve(wire.OpFSGlob, func(s *server, _ *request, a wire.FSGlobRequest) (any, *wire.WireError) {
		return s.ws.glob(a)
	}))
	add(wire.OpFSCopyIn.Name, serve(wire.OpFSCopyIn, func(s *server, r *request, a wire.FSPathRequest) (any, *wire.WireError) {
		return s.ws.copyIn(r, a.Path)
	}))
	add(wire.OpFSCopyOut.Name, serve(wire.OpFSCopyOut, func(s *server, r *request, a wire.FSPathRequest) (any, *wire.WireError) {
		return s.ws.copyOut(r, a.Path)
	}))
}
