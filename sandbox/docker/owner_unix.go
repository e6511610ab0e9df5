//go:build unix

package docker

import (
	"io/fs"
	"syscall"
)

// fileOwner returns the uid and gid that own a file of this machine (the
// host workspace's directory).
func fileOwner(fi fs.FileInfo) (uid, gid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return int(st.Uid), int(st.Gid), true
}
