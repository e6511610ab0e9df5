//go:build !unix

package server

import (
	"io/fs"
)

// searchFS is the workspace as the search engine reads it (fs.ReadDirFS,
// fs.StatFS), here through os.Root (search_unix.go opens with openat2 and
// reads bare descriptors where it can).
type searchFS struct{ w *workspace }

func (s searchFS) Open(name string) (fs.File, error) { return s.w.root.Open(name) }

func (s searchFS) Stat(name string) (fs.FileInfo, error) { return s.w.root.Stat(name) }

func (s searchFS) ReadDir(name string) ([]fs.DirEntry, error) {
	f, err := s.w.root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.ReadDir(-1)
}
