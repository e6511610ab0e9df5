//go:build unix && !linux

package server

import (
	"io/fs"
	"os"
)

// readDirFD lists the directory open as fd (named name) and closes fd.
func readDirFD(_ *workspace, fd int, name string) ([]fs.DirEntry, error) {
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	return f.ReadDir(-1)
}
