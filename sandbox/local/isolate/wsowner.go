//go:build linux

package isolate

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Workspace ownership when the host runs as root.
//
// A sandbox runs as an unprivileged host uid (never host root), so a root
// host gives it the workspace by chowning the files to that uid, and gives
// them back when the last sandbox on the workspace is gone. The first
// version gave each sandbox its own uid and chowned the tree to it: a
// second sandbox on the same workspace (`sandboxkit mcp --workspace D`
// shares D between sessions) took every file from the first, which then
// got SBX_PERMISSION on its own files; the one closing last gave the tree to
// the other's random uid; every file's own owner was lost (1000:1000 came
// back 0:0); a file hardlinked in from outside was chowned too; and after a
// host SIGKILL the tree stayed with the random uid (issue 17).
//
// Now a workspace has one sandbox uid, shared by every sandbox on it, kept
// in a record under wsStateDir (root-only) together with the list of
// sandboxes using it and a manifest of each file's original owner,
// written before the first chown. Prepare joins the record
// (creating it and chowning the tree the first time), Cleanup leaves it,
// and the last one to leave gives every file back: a file of the manifest
// to its owner, a file the sandboxes made to the workspace directory's
// owner. `sandboxkit gc` (GCWorkspaces) does the same for records whose
// sandboxes all belong to dead hosts. A file with a hard link outside the
// workspace (its link count is higher than the links the walk finds
// inside) is never chowned: that would change a file outside the
// workspace; the sandboxes can write it only if its mode lets others write.

// wsStateDir holds one record per workspace given to sandbox uids. It must
// survive a reboot (the files stay chowned until someone gives them back).
var wsStateDir = "/var/lib/sandboxkit/workspaces"

// wsRecord is the JSON record of one workspace.
type wsRecord struct {
	Path string `json:"path"`
	Dev  uint64 `json:"dev"`
	Ino  uint64 `json:"ino"`
	// UID and GID are the sandbox uid and gid every sandbox on it runs as.
	UID int `json:"uid"`
	GID int `json:"gid"`
	// Owner is the workspace directory's own owner: new files get it.
	OwnerUID int      `json:"owner_uid"`
	OwnerGID int      `json:"owner_gid"`
	Users    []wsUser `json:"users"`
}

// wsUser is one sandbox on the workspace: its host process (with the
// process's start time, so that a reused pid does not count) and its ID.
type wsUser struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
	ID    string `json:"id"`
}

// wsLease is a sandbox's share of a workspace record.
type wsLease struct {
	path, key string
	uid, gid  int
	user      wsUser
}

// freshUID draws a sandbox uid from the reserved range.
func freshUID() (int, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, err
	}
	return uidRangeStart + int(binary.LittleEndian.Uint32(b[:])%uidRangeSize), nil
}

// processStart returns a process's start time in clock ticks since boot
// (field 22 of /proc/PID/stat), 0 if it does not exist.
func processStart(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}

func (u wsUser) alive() bool { return u.Start != 0 && processStart(u.PID) == u.Start }

// lockWorkspaceRecord opens the state directory and takes the record's
// lock (an flock on KEY.lock, released when the file is closed). The one
// who gives the workspace back removes the lock file while holding it
// (dropLock), so a waiter that then gets the lock on the removed file
// opens the path again.
func lockWorkspaceRecord(key string) (*os.File, error) {
	if err := os.MkdirAll(wsStateDir, 0o700); err != nil {
		return nil, err
	}
	path := filepath.Join(wsStateDir, key+".lock")
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return nil, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
			f.Close()
			return nil, err
		}
		var held, now unix.Stat_t
		if unix.Fstat(int(f.Fd()), &held) == nil && unix.Stat(path, &now) == nil && held.Ino == now.Ino && held.Dev == now.Dev {
			return f, nil
		}
		f.Close()
	}
}

// dropLock removes the lock file of a record that is gone; the caller
// holds the lock.
func dropLock(key string) { os.Remove(filepath.Join(wsStateDir, key+".lock")) }

func readRecord(key string) (*wsRecord, error) {
	b, err := os.ReadFile(filepath.Join(wsStateDir, key+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r wsRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("workspace record %s: %w", key, err)
	}
	return &r, nil
}

// writeState replaces name in wsStateDir with data (write, then rename:
// a reader sees the old or the new file, whole). It does not fsync: what
// it guards against is a host killed with SIGKILL, whose writes the page
// cache keeps; an fsync costs 3.6 ms here (ext4, measured), twice per
// sandbox creation of ~20 ms, for a power cut between the record and
// the chown.
func writeState(name string, data []byte) error {
	tmp := filepath.Join(wsStateDir, name+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(wsStateDir, name))
	}
	return err
}

func writeRecord(key string, r *wsRecord) error {
	b, _ := json.Marshal(r)
	return writeState(key+".json", b)
}

func workspaceKey(path string) (string, uint64, uint64, *syscall.Stat_t, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return "", 0, 0, nil, err
	}
	st := fi.Sys().(*syscall.Stat_t)
	return fmt.Sprintf("%x-%x", st.Dev, st.Ino), st.Dev, st.Ino, st, nil
}

// acquireWorkspace gives the sandbox id a share of ws: the record's uid
// if other sandboxes (or a dead host's) hold it, else a fresh uid, with the
// manifest written and the tree chowned to it.
func acquireWorkspace(ws, id string) (*wsLease, error) {
	key, dev, ino, st, err := workspaceKey(ws)
	if err != nil {
		return nil, err
	}
	lock, err := lockWorkspaceRecord(key)
	if err != nil {
		return nil, fmt.Errorf("lock the workspace's ownership record: %w", err)
	}
	defer lock.Close()
	me := wsUser{PID: os.Getpid(), Start: processStart(os.Getpid()), ID: id}
	rec, err := readRecord(key)
	if err != nil {
		return nil, err
	}
	var live []wsUser
	if rec != nil {
		for _, u := range rec.Users {
			if u.alive() {
				live = append(live, u)
			}
		}
	}
	if len(live) > 0 {
		// Running sandboxes hold it (under this path, or another one if
		// it was renamed: the key is the device and inode): the files
		// are the record's uid's.
		rec.Path = ws
		rec.Users = append(live, me)
		if err := writeRecord(key, rec); err != nil {
			return nil, err
		}
		return &wsLease{path: ws, key: key, uid: rec.UID, gid: rec.GID, user: me}, nil
	}
	if rec != nil {
		// Left by a host that died before gc ran (or by a removed
		// directory whose inode this one reuses): give back what is the
		// record's uid's here, then start afresh.
		rec.Path = ws
		if err := restoreWorkspace(key, rec); err != nil {
			return nil, err
		}
		// The directory itself may have been given back.
		if _, _, _, st, err = workspaceKey(ws); err != nil {
			return nil, err
		}
	}
	uid, err := freshUID()
	if err != nil {
		return nil, err
	}
	rec = &wsRecord{Path: ws, Dev: dev, Ino: ino, UID: uid, GID: uid, OwnerUID: int(st.Uid), OwnerGID: int(st.Gid), Users: []wsUser{me}}
	entries, err := scanWorkspace(ws)
	if err != nil {
		return nil, err
	}
	// The manifest and the record are written before the first chown: a
	// host killed in the middle leaves what gc needs. The manifest lists
	// only the files whose owner is not the directory's (often none: the
	// file is then not written at all).
	var man strings.Builder
	for _, e := range entries {
		if int(e.uid) != rec.OwnerUID || int(e.gid) != rec.OwnerGID {
			fmt.Fprintf(&man, "%d %d %s\n", e.uid, e.gid, strconv.Quote(e.rel))
		}
	}
	if man.Len() > 0 {
		if err := writeState(key+".owners", []byte(man.String())); err != nil {
			return nil, err
		}
	}
	if err := writeRecord(key, rec); err != nil {
		return nil, err
	}
	for _, e := range entries {
		if !e.insideOnly {
			continue // a hard link outside the workspace: never chowned
		}
		if err := os.Lchown(filepath.Join(ws, e.rel), uid, uid); err != nil && !errors.Is(err, fs.ErrNotExist) {
			// Give back what was given so far; the caller fails.
			if rerr := restoreWorkspace(key, rec); rerr != nil {
				err = errors.Join(err, rerr)
			} else {
				dropLock(key)
			}
			return nil, err
		}
	}
	return &wsLease{path: ws, key: key, uid: uid, gid: uid, user: me}, nil
}

// release leaves the record; the last sandbox gives the files back.
func (l *wsLease) release() error {
	lock, err := lockWorkspaceRecord(l.key)
	if err != nil {
		return err
	}
	defer lock.Close()
	rec, err := readRecord(l.key)
	if err != nil || rec == nil {
		return err
	}
	var users []wsUser
	for _, u := range rec.Users {
		if u != l.user && u.alive() {
			users = append(users, u)
		}
	}
	if len(users) > 0 {
		rec.Users = users
		return writeRecord(l.key, rec)
	}
	if err := restoreWorkspace(l.key, rec); err != nil {
		return err
	}
	dropLock(l.key)
	return nil
}

// wsEntry is one path of a workspace walk.
type wsEntry struct {
	rel      string
	uid, gid uint32
	// insideOnly: every hard link of the file is inside the workspace
	// (always true for directories and symlinks).
	insideOnly bool
}

// scanWorkspace walks ws without following symlinks.
func scanWorkspace(ws string) ([]wsEntry, error) {
	type inode struct{ dev, ino uint64 }
	var out []wsEntry
	links := map[inode]int{}
	nlink := map[inode]uint64{}
	idx := map[inode][]int{}
	err := filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		fi, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		rel, _ := filepath.Rel(ws, p)
		e := wsEntry{rel: rel, uid: st.Uid, gid: st.Gid, insideOnly: true}
		if !d.IsDir() && st.Nlink > 1 {
			k := inode{st.Dev, st.Ino}
			links[k]++
			nlink[k] = uint64(st.Nlink) // uint32 on arm64
			idx[k] = append(idx[k], len(out))
		}
		out = append(out, e)
		return nil
	})
	for k, n := range links {
		if uint64(n) < nlink[k] {
			for _, i := range idx[k] {
				out[i].insideOnly = false
			}
		}
	}
	return out, err
}

// restoreWorkspace gives every file of rec's workspace that belongs to the
// sandbox uid back: to its owner in the manifest, or (not in it: owned by
// the workspace directory's owner before, or made by a sandbox) to the
// workspace directory's owner; then it removes the record. The
// directory must still be the one recorded (same device and inode).
func restoreWorkspace(key string, rec *wsRecord) error {
	owners := map[string][2]int{}
	if f, err := os.Open(filepath.Join(wsStateDir, key+".owners")); err == nil {
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			// uid gid "quoted path"
			f := strings.SplitN(sc.Text(), " ", 3)
			if len(f) != 3 {
				continue
			}
			uid, err1 := strconv.Atoi(f[0])
			gid, err2 := strconv.Atoi(f[1])
			rel, err3 := strconv.Unquote(f[2])
			if err1 == nil && err2 == nil && err3 == nil {
				owners[rel] = [2]int{uid, gid}
			}
		}
		f.Close()
	}
	var errs []error
	if _, dev, ino, _, err := workspaceKey(rec.Path); err == nil && dev == rec.Dev && ino == rec.Ino {
		entries, err := scanWorkspace(rec.Path)
		if err != nil {
			errs = append(errs, err)
		}
		for _, e := range entries {
			if (int(e.uid) != rec.UID && int(e.gid) != rec.GID) || !e.insideOnly {
				continue
			}
			o, ok := owners[e.rel]
			if !ok {
				o = [2]int{rec.OwnerUID, rec.OwnerGID}
			}
			if err := os.Lchown(filepath.Join(rec.Path, e.rel), o[0], o[1]); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("give the workspace %s back: %w", rec.Path, errors.Join(errs...))
	}
	for _, suffix := range []string{".json", ".owners"} {
		os.Remove(filepath.Join(wsStateDir, key+suffix))
	}
	return nil
}

// GCWorkspaces gives back the workspaces whose sandboxes all belonged to
// host processes that are gone (killed before Cleanup): every file to its
// owner from before the first sandbox. It returns their paths. Only root
// gives workspaces away, so for other users it does nothing.
func GCWorkspaces() ([]string, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	ents, err := os.ReadDir(wsStateDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var done []string
	var errs []error
	for _, e := range ents {
		key, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		path, err := gcWorkspace(key)
		if err != nil {
			errs = append(errs, err)
		}
		if path != "" {
			done = append(done, path)
		}
	}
	return done, errors.Join(errs...)
}

func gcWorkspace(key string) (string, error) {
	lock, err := lockWorkspaceRecord(key)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	rec, err := readRecord(key)
	if err != nil || rec == nil {
		return "", err
	}
	for _, u := range rec.Users {
		if u.alive() {
			return "", nil
		}
	}
	if err := restoreWorkspace(key, rec); err != nil {
		return "", err
	}
	dropLock(key)
	return rec.Path, nil
}
