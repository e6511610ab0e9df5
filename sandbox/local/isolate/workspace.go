//go:build linux

package isolate

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// copyTree copies directories, regular files and symlinks from src to dst,
// keeping modes and modification times. It runs inside the sandbox's
// mount namespace at setup (seeding the quota tmpfs), where src is the
// host workspace.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if rel != "." {
				if err := os.Mkdir(target, info.Mode().Perm()|0o700); err != nil {
					return err
				}
			} else if err := os.Chmod(target, info.Mode().Perm()|0o700); err != nil {
				return err
			}
		case d.Type()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(l, target)
		case d.Type().IsRegular():
			if err := copyFile(p, target, info.Mode().Perm()); err != nil {
				return err
			}
		default:
			return nil // sockets, fifos, devices are not workspace data
		}
		return os.Chtimes(target, info.ModTime(), info.ModTime())
	})
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// SaveWorkspace writes the quota tmpfs's content back into the host
// workspace, so that a kept workspace holds what the sandbox left there:
// the host directory becomes a copy of /workspace (files gone inside are
// removed). Only directories, regular files and symlinks are copied, and
// the sandbox's tree is read through an os.Root, so a symlink planted
// inside cannot make the host read or write outside either tree. The
// sandbox is frozen while it copies. Without a disk quota the workspace is
// the host directory itself and SaveWorkspace does nothing. Call it before
// KillAll.
func (h *Handle) SaveWorkspace() error {
	if h.spec.Limits.DiskBytes <= 0 || h.spec.Tier.String() != "namespace" {
		return nil
	}
	h.mu.Lock()
	pid, wasFrozen := h.pid, h.frozen
	h.mu.Unlock()
	if pid == 0 {
		return errors.New("isolate: SaveWorkspace before Started")
	}
	if !wasFrozen {
		if err := h.Freeze(); err != nil {
			return err
		}
		defer h.Thaw()
	}
	src, err := os.OpenRoot("/proc/" + strconv.Itoa(pid) + "/root" + WorkspaceInside)
	if err != nil {
		return fmt.Errorf("isolate: open the sandbox's workspace: %w", err)
	}
	defer src.Close()
	dst, err := os.OpenRoot(h.spec.HostWorkspace)
	if err != nil {
		return fmt.Errorf("isolate: open the host workspace: %w", err)
	}
	defer dst.Close()
	uid, gid := -1, -1
	if h.lease != nil {
		uid, gid = h.spec.Plan.HostUID, h.spec.Plan.HostGID
	}
	return mirror(src, dst, uid, gid)
}

// mirror makes dst a copy of src (both confined roots).
func mirror(src, dst *os.Root, uid, gid int) error {
	seen := map[string]bool{".": true}
	err := fs.WalkDir(src.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		seen[p] = true
		if p == "." {
			return nil
		}
		info, err := src.Lstat(p)
		if err != nil {
			return err
		}
		old, oldErr := dst.Lstat(p)
		if oldErr == nil && (old.Mode().Type() != info.Mode().Type()) {
			if err := dst.RemoveAll(p); err != nil {
				return err
			}
			oldErr = fs.ErrNotExist
		}
		switch {
		case info.IsDir():
			if oldErr != nil {
				if err := dst.Mkdir(p, info.Mode().Perm()); err != nil {
					return err
				}
			} else if err := dst.Chmod(p, info.Mode().Perm()); err != nil {
				return err
			}
		case info.Mode()&fs.ModeSymlink != 0:
			l, err := src.Readlink(p)
			if err != nil {
				return err
			}
			if oldErr == nil {
				if err := dst.Remove(p); err != nil {
					return err
				}
			}
			if err := dst.Symlink(l, p); err != nil {
				return err
			}
		case info.Mode().IsRegular():
			in, err := src.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
			if err != nil {
				return err
			}
			out, err := dst.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, info.Mode().Perm())
			if err != nil {
				in.Close()
				return err
			}
			_, err = io.Copy(out, in)
			in.Close()
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			if err := dst.Chmod(p, info.Mode().Perm()); err != nil {
				return err
			}
		default:
			return nil
		}
		if uid >= 0 {
			if err := dst.Lchown(p, uid, gid); err != nil {
				return err
			}
		}
		if info.Mode()&fs.ModeSymlink == 0 {
			return dst.Chtimes(p, info.ModTime(), info.ModTime())
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("isolate: save workspace: %w", err)
	}
	// Remove what the sandbox deleted.
	var gone []string
	fs.WalkDir(dst.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if !seen[p] {
			gone = append(gone, p)
			if d.IsDir() {
				return fs.SkipDir
			}
		}
		return nil
	})
	for _, p := range gone {
		if err := dst.RemoveAll(p); err != nil {
			return fmt.Errorf("isolate: save workspace: %w", err)
		}
	}
	return nil
}
