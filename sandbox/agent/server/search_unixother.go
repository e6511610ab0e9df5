//go:build unix && !linux

package server

import "golang.org/x/sys/unix"

// The system calls of search_unix.go's fdFile where the agent does not
// serve (see search_linux.go for Linux's).

func searchRead(fd int, p []byte) (int, error) { return unix.Read(fd, p) }

func searchClose(fd int) error { return unix.Close(fd) }

func searchFstat(fd int, st *unix.Stat_t) error { return unix.Fstat(fd, st) }

func searchDup(fd int) (int, error) { return unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0) }
