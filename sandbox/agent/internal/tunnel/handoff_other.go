//go:build !linux

package tunnel

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
)

// Elsewhere no descriptor is handed over: connections are carried.

const handoffSupported = false

func isUnixStream(syscall.RawConn) bool { return false }

var rightsSpace = 0

func recvStream(syscall.RawConn, []byte, []byte) (int, []int, error) {
	return 0, nil, errors.ErrUnsupported
}

func sendHandoff(syscall.RawConn, []byte, int) error { return errors.ErrUnsupported }

func handedSocket(int, netip.AddrPort) (*net.TCPConn, error) { return nil, errors.ErrUnsupported }

func (c *handedConn) shutdown() {}
