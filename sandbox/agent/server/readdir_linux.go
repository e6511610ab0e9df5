package server

import (
	"encoding/binary"
	"io/fs"
	"path"

	"golang.org/x/sys/unix"
)

// readDirFD lists the directory open as fd (named name) and closes fd. It
// reads the entries with getdents64 into one buffer and takes their types
// from it: os.File's ReadDir on the same descriptor costs two more system
// calls per directory (the poller's registration attempt) and an
// allocation per entry.
func readDirFD(w *workspace, fd int, name string) ([]fs.DirEntry, error) {
	defer unix.Close(fd)
	buf := make([]byte, 32<<10)
	// The entries are made in one slice and handed out as pointers into
	// it, and the names of one getdents batch are cut from one string: a
	// value of their own for each (boxed in fs.DirEntry) and a string each
	// were two allocations per entry, 26,000 per search of the Go tree.
	var ds []dirent
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return entries(ds), err
		}
		if n <= 0 {
			return entries(ds), nil
		}
		names := string(buf[:n])
		for b := buf[:n]; len(b) > 0; {
			// struct linux_dirent64: ino u64, off s64, reclen u16,
			// type u8, name (NUL-terminated).
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 20 || reclen > len(b) {
				return entries(ds), unix.EIO
			}
			typ, at := b[18], n-len(b)+19
			nameb := b[19:reclen]
			b = b[reclen:]
			if i := indexNUL(nameb); i >= 0 {
				nameb = nameb[:i]
			}
			ent := names[at : at+len(nameb)]
			if ent == "." || ent == ".." {
				continue
			}
			mode, ok := direntMode(typ)
			if !ok {
				// DT_UNKNOWN: some file systems leave the type to a stat.
				var st unix.Stat_t
				if unix.Fstatat(fd, ent, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
					continue
				}
				mode = statMode(st.Mode)
			}
			ds = append(ds, dirent{w: w, dir: name, name: ent, mode: mode})
		}
	}
}

func entries(ds []dirent) []fs.DirEntry {
	ents := make([]fs.DirEntry, len(ds))
	for i := range ds {
		ents[i] = &ds[i]
	}
	return ents
}

func indexNUL(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}

func direntMode(t byte) (fs.FileMode, bool) {
	switch t {
	case unix.DT_REG:
		return 0, true
	case unix.DT_DIR:
		return fs.ModeDir, true
	case unix.DT_LNK:
		return fs.ModeSymlink, true
	case unix.DT_FIFO:
		return fs.ModeNamedPipe, true
	case unix.DT_SOCK:
		return fs.ModeSocket, true
	case unix.DT_CHR:
		return fs.ModeDevice | fs.ModeCharDevice, true
	case unix.DT_BLK:
		return fs.ModeDevice, true
	}
	return 0, false
}

func statMode(m uint32) fs.FileMode {
	switch m & unix.S_IFMT {
	case unix.S_IFREG:
		return 0
	case unix.S_IFDIR:
		return fs.ModeDir
	case unix.S_IFLNK:
		return fs.ModeSymlink
	}
	return fs.ModeIrregular
}

// dirent is a directory entry read by readDirFD.
type dirent struct {
	w         *workspace
	dir, name string
	mode      fs.FileMode
}

func (d dirent) Name() string      { return d.name }
func (d dirent) IsDir() bool       { return d.mode.IsDir() }
func (d dirent) Type() fs.FileMode { return d.mode.Type() }
func (d dirent) Info() (fs.FileInfo, error) {
	return d.w.root.Lstat(path.Join(d.dir, d.name))
}
