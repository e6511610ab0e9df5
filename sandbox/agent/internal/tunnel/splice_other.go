//go:build !linux

package tunnel

import (
	"errors"
	"syscall"
)

// Elsewhere the bytes are copied: there is no splice(2).

const spliceSupported = false

func newPipe(int) (*kpipe, error) { return nil, errors.ErrUnsupported }

func closeFD(int) {}

func growSendBuffer(syscall.RawConn, int) {}

func spliceFrom(syscall.RawConn, int, int) (int, error) { return 0, errors.ErrUnsupported }

func spliceTo(syscall.RawConn, int, int) (int, error) { return 0, errors.ErrUnsupported }

func spliceFill(syscall.RawConn, int, int) (int, error) { return 0, errors.ErrUnsupported }

func pipeWrite(int, []byte) int { return 0 }

func readStream(syscall.RawConn, []byte) error { return errors.ErrUnsupported }

func waitReadable(syscall.RawConn) error { return errors.ErrUnsupported }

func pipeRead(int, []byte) (int, error) { return 0, errors.ErrUnsupported }

func unsupported(err error) bool { return errors.Is(err, errors.ErrUnsupported) }
