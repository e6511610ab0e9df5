package grep

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// DirFS is an fs.ReadDirFS that can also hand out a directory it lists as
// a handle to open the directory's files through. Search uses it when
// the searched file system implements it: a file opened by its name in an
// open directory costs the kernel the lookup of that one name, where a
// path from the root costs one lookup per directory on the way.
type DirFS interface {
	fs.ReadDirFS
	// ReadDirHandle lists the directory name as ReadDir does, and
	// returns a handle to open its entries with (nil: none, the files
	// are opened by path). The caller closes the handle.
	ReadDirHandle(name string) ([]fs.DirEntry, DirHandle, error)
}

// DirHandle opens the files of one directory of a DirFS.
type DirHandle interface {
	// Open opens the directory's entry name (a name ReadDirHandle
	// listed, never a path) for reading, as the DirFS's Open would open
	// the entry's path.
	Open(name string) (fs.File, error)
	Close() error
}

// maxDirHandles bounds the directory handles one search holds open: a
// handle stays open while files of its directory wait for a worker (the
// walk runs up to 8 batches ahead), and while the walk is below it before
// the directory's last file, so a hostile tree (thousands of nested
// directories) could otherwise hold a descriptor per level. Past the
// bound, files are opened by path. Over the Go tree (8.7 files per
// directory) 32 opened a quarter of the files by path, 64 one in thirty;
// 32 it is, because the descriptors come out of the agent's reserve for
// file and search requests (fds.go: 288 of 1,024 in a local sandbox), and
// a search that cannot open a file passes it over.
const maxDirHandles = 32

// Options tunes Search. The zero value searches every regular file with no
// limit.
type Options struct {
	// MaxResults stops the search once that many matching lines are
	// certain (0: no limit). The matches returned are then the first
	// MaxResults in the result order, and Truncated is set.
	MaxResults int
	// MaxFileSize skips larger files (0: no limit). They count in Files.
	MaxFileSize int64
	// MaxLineBytes cuts the text of a longer matching line, at a rune
	// boundary (0: whole lines).
	MaxLineBytes int
	// SkipDir reports whether to leave out the directory p below the
	// root (never called for the root itself).
	SkipDir func(p string, d fs.DirEntry) bool
	// Select reports whether to search the regular file p (name is its
	// base name); nil selects every file. It is called for the root too
	// when the root is a file.
	Select func(p, name string) bool
	// Workers is how many files are read and matched at once (0: the
	// runtime's GOMAXPROCS, at least 2, so that one worker's read
	// overlaps another's matching).
	Workers int
}

// Match is one matching line.
type Match struct {
	// Path is the file's path in the searched fs.FS.
	Path string
	// Line is the line's number, counted from 1.
	Line int
	// Text is the line without its newline (and without a final \r),
	// cut to Options.MaxLineBytes; each byte that is not valid UTF-8 is
	// shown as U+FFFD, and InvalidUTF8 says so.
	Text        string
	InvalidUTF8 bool
}

// Result is what Search found.
type Result struct {
	// Matches are in walk order (fs.WalkDir's: a directory's entries by
	// name, each directory's files where it sorts), then by line.
	Matches []Match
	// Truncated says more lines matched than Options.MaxResults, or the
	// search stopped with files left unread.
	Truncated bool
	// Files is the number of files searched; SkippedBinary counts the
	// binary files (a NUL byte in their first 8000 bytes, git's rule)
	// that matched, whose lines are not reported.
	Files         int
	SkippedBinary int
}

// Search searches the files below root (a directory or a file) in fsys for
// lines that m matches. Symbolic links below the root are not followed (a
// root that is one is, by fsys); confining paths is fsys's job. An error
// reading the root is returned as it is; unreadable files and directories
// below it are passed over. When ctx ends, Search returns what it counted
// (Files) and ctx's error, after each worker has stopped inside the file
// it was reading.
//
// Files are read and matched by Options.Workers goroutines while one walks
// the tree in order, handing them out with their rank; the matches are put
// back in that order at the end.
func Search(ctx context.Context, fsys fs.ReadDirFS, root string, m *Matcher, opt Options) (*Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := &searcher{ctx: ctx, fsys: fsys, m: m, opt: opt, results: map[int]fileResult{}}
	workers := opt.Workers
	if workers <= 0 {
		workers = max(2, runtime.GOMAXPROCS(0))
	}
	q := newBatchQueue(ctx)
	defer q.release()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.work(q)
		}()
	}
	s.files = q
	walkErr := s.walkRoot(root)
	if walkErr == nil || walkErr == errStop {
		s.flush()
	}
	for _, j := range s.batch { // not handed out: the walk stopped
		j.dir.release()
	}
	q.close()
	wg.Wait()
	if walkErr != nil && walkErr != errStop {
		return nil, walkErr
	}
	if err := ctx.Err(); err != nil {
		return &Result{Files: s.scanned}, err
	}
	return s.result(), nil
}

var errStop = errors.New("search stopped")

type job struct {
	rank int
	path string
	// name is the file's name in dir, when dir is not nil: it is opened
	// through dir's handle.
	name string
	dir  *dirRef
}

// dirRef is a directory handle shared by the walk and the jobs of the
// directory's files; the last to let go closes it.
type dirRef struct {
	h    DirHandle
	refs atomic.Int32
	open *atomic.Int32 // the search's count of open handles
}

func (d *dirRef) hold() *dirRef {
	d.refs.Add(1)
	return d
}

// release lets go of d; nil is a no-op.
func (d *dirRef) release() {
	if d != nil && d.refs.Add(-1) == 0 {
		d.h.Close()
		d.open.Add(-1)
	}
}

type fileResult struct {
	matches []Match
	binary  bool
}

type searcher struct {
	ctx   context.Context
	fsys  fs.ReadDirFS
	m     *Matcher
	opt   Options
	files *batchQueue
	batch []job
	rank  int
	// stopped: the walk ended at MaxResults with files left.
	stopped bool

	mu      sync.Mutex
	results map[int]fileResult // by rank, files that matched
	total   int                // matching lines in results
	scanned int

	handles atomic.Int32 // directory handles open (maxDirHandles)
}

func (s *searcher) walkRoot(root string) error {
	st, err := fs.Stat(s.fsys, root)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		if st.Mode().IsRegular() {
			return s.offer(root, path.Base(root), nil)
		}
		return nil
	}
	return s.walkDir(root, true)
}

// walkDir hands out the files below dir in walk order.
func (s *searcher) walkDir(dir string, root bool) error {
	ents, ref, err := s.readDir(dir)
	// The walk holds the directory's handle until it has offered the
	// last file in it, not through the subdirectories after that: only
	// the files still to be opened keep a handle open.
	defer func() { ref.release() }()
	if err != nil && root {
		return err
	}
	if !slices.IsSortedFunc(ents, byName) {
		slices.SortFunc(ents, byName)
	}
	last := -1
	for i, d := range ents {
		if d.Type().IsRegular() {
			last = i
		}
	}
	if last < 0 {
		ref.release()
		ref = nil
	}
	for i, d := range ents {
		if s.ctx.Err() != nil {
			return errStop
		}
		name := d.Name()
		p := name
		if dir != "." {
			p = dir + "/" + name
		}
		if d.IsDir() {
			if s.opt.SkipDir != nil && s.opt.SkipDir(p, d) {
				continue
			}
			if err := s.walkDir(p, false); err != nil {
				return err
			}
			continue
		}
		if !d.Type().IsRegular() {
			continue
		}
		if err := s.offer(p, name, ref); err != nil {
			return err
		}
		if i == last {
			ref.release()
			ref = nil
		}
	}
	return nil
}

// readDir lists dir, with a handle to open its files through when the
// file system has them (DirFS) and fewer than maxDirHandles are open.
func (s *searcher) readDir(dir string) ([]fs.DirEntry, *dirRef, error) {
	dfs, ok := s.fsys.(DirFS)
	if !ok || s.handles.Load() >= maxDirHandles {
		ents, err := s.fsys.ReadDir(dir)
		return ents, nil, err
	}
	ents, h, err := dfs.ReadDirHandle(dir)
	if h == nil {
		return ents, nil, err
	}
	s.handles.Add(1)
	ref := &dirRef{h: h, open: &s.handles}
	ref.refs.Store(1) // the walk's, until it has offered every file
	return ents, ref, err
}

func byName(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) }

// offer hands the file p (named name in the directory dir, when dir is
// not nil) to a worker, unless it is not selected or enough matches are
// certain.
func (s *searcher) offer(p, name string, dir *dirRef) error {
	if s.opt.Select != nil && !s.opt.Select(p, name) {
		return nil
	}
	if s.opt.MaxResults > 0 {
		s.mu.Lock()
		enough := s.total >= s.opt.MaxResults
		s.mu.Unlock()
		if enough {
			// Every file before this one is searched: the first
			// MaxResults matches are known, and this file is left
			// unread (it may hold more).
			s.stopped = true
			return errStop
		}
	}
	j := job{rank: s.rank, path: p}
	if dir != nil {
		j.name, j.dir = name, dir.hold()
	}
	s.batch = append(s.batch, j)
	s.rank++
	if len(s.batch) == batchSize {
		return s.flush()
	}
	return nil
}

// batchSize is how many files the walk hands a worker at once. One file at
// a time cost a goroutine hand-off per file: a worker parked and woken, and
// the runtime's idle threads spinning and sleeping in between (11,175
// nanosleep calls in one search of the Go tree, about one per file).
const batchSize = 32

// flush hands the files collected so far to a worker.
func (s *searcher) flush() error {
	if len(s.batch) == 0 {
		return nil
	}
	if !s.files.push(s.batch) {
		return errStop
	}
	s.batch = make([]job, 0, batchSize)
	return nil
}

// batchQueue hands the walk's batches to the workers. Where a channel
// woke the walk for every batch a worker took once it was full (the walk
// is several times faster than the workers, so it was full most of the
// time), the walk is woken only when the queue is half empty: the walk
// fills it again in one go. Each wake-up of a parked goroutine is a wake-up
// of an idle thread of the runtime, an OS context switch.
type batchQueue struct {
	mu      sync.Mutex
	ready   sync.Cond // a batch is queued, or the queue is closed
	room    sync.Cond // the queue is half empty, or the search stopped
	batches [][]job
	waiting int  // workers waiting in ready
	full    bool // the walk waits in room
	closed  bool
	stopped bool        // the search's context ended
	release func() bool // unregisters stop from the context
}

// queueMax is the most batches queued; the walk waits for queueMax/2.
const queueMax = 8

func newBatchQueue(ctx context.Context) *batchQueue {
	q := &batchQueue{}
	q.ready.L, q.room.L = &q.mu, &q.mu
	q.release = context.AfterFunc(ctx, func() {
		q.mu.Lock()
		q.stopped = true
		q.room.Broadcast()
		q.mu.Unlock()
	})
	return q
}

// push queues b, waiting for room; false when the search stopped.
func (q *batchQueue) push(b []job) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.batches) >= queueMax && !q.stopped {
		q.full = true
		q.room.Wait()
	}
	if q.stopped {
		return false
	}
	q.batches = append(q.batches, b)
	if q.waiting > 0 {
		q.ready.Signal()
	}
	return true
}

// pop returns the next batch, waiting for one; false when the queue is
// closed and empty.
func (q *batchQueue) pop() ([]job, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.batches) == 0 && !q.closed {
		q.waiting++
		q.ready.Wait()
		q.waiting--
	}
	if len(q.batches) == 0 {
		return nil, false
	}
	b := q.batches[0]
	q.batches[0] = nil
	q.batches = q.batches[1:]
	if q.full && len(q.batches) <= queueMax/2 {
		q.full = false
		q.room.Signal()
	}
	return b, true
}

// close says no more batches come: the workers end once the queue is
// empty.
func (q *batchQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.ready.Broadcast()
	q.mu.Unlock()
}

// readBufs keeps the workers' read buffers from one search to the next: a
// search allocated them afresh, growing each to the largest file it met
// (9 MB allocated and zeroed per search of the Go tree, two or three
// garbage collections each, and with them preemption signals to every
// worker). A buffer grown past maxPooledBuf is left to the collector.
//
// Not a sync.Pool: a pool drops everything it holds when GOMAXPROCS
// changes, and the agent changes it for every search (widenProcs), so each
// search allocated its buffers again (8 MB per search of the Go tree, and
// a garbage collection with its stop-the-world phases in every search).
// Nor held weakly: the collection that a search's other allocations start
// freed them as often. They are kept until no search has used them for
// keepReadBufs, as long as a pool would keep them in an idle agent (the
// runtime collects at least every two minutes).
var readBufs struct {
	sync.Mutex
	free  []*[]byte
	timer *time.Timer // empties free after keepReadBufs unused
}

const (
	maxPooledBuf = 4 << 20
	keepReadBufs = time.Minute
)

func getReadBuf() *[]byte {
	readBufs.Lock()
	defer readBufs.Unlock()
	if n := len(readBufs.free); n > 0 {
		bp := readBufs.free[n-1]
		readBufs.free[n-1] = nil
		readBufs.free = readBufs.free[:n-1]
		return bp
	}
	b := make([]byte, 0, 64<<10)
	return &b
}

func putReadBuf(bp *[]byte) {
	if cap(*bp) > maxPooledBuf {
		return
	}
	*bp = (*bp)[:0]
	readBufs.Lock()
	defer readBufs.Unlock()
	if len(readBufs.free) >= 64 {
		return
	}
	readBufs.free = append(readBufs.free, bp)
	if readBufs.timer == nil {
		readBufs.timer = time.AfterFunc(keepReadBufs, func() {
			readBufs.Lock()
			clear(readBufs.free)
			readBufs.free = readBufs.free[:0]
			readBufs.Unlock()
		})
	} else {
		readBufs.timer.Reset(keepReadBufs)
	}
}

func (s *searcher) work(q *batchQueue) {
	bp := getReadBuf()
	buf := *bp
	defer func() {
		*bp = buf
		putReadBuf(bp)
	}()
	for {
		batch, ok := q.pop()
		if !ok {
			return
		}
		for i, j := range batch {
			if s.ctx.Err() != nil {
				for _, j := range batch[i:] {
					j.dir.release()
				}
				break
			}
			var res fileResult
			res, buf = s.searchFile(j, buf)
			s.mu.Lock()
			s.scanned++
			if len(res.matches) > 0 || res.binary {
				s.results[j.rank] = res
				s.total += len(res.matches)
			}
			s.mu.Unlock()
		}
		// A worker that runs on for 10 ms without a yield (system
		// calls do not count) is preempted by the runtime's monitor,
		// with a signal, and each preemption sets the monitor back to
		// waking every 20 µs for at least a millisecond: ~9 signals and
		// ~680 wake-ups (nanosleep) of the monitor per search of the Go
		// tree, 40% of the agent's context switches. A batch takes well
		// under a millisecond; yielding after each keeps the monitor
		// asleep, and lets the walk run if it waits for a P (a woken
		// walk is queued on the P of the worker that woke it).
		runtime.Gosched()
	}
}

// searchFile reads the file j whole into buf (grown as needed and handed
// back for the next file) and matches it.
func (s *searcher) searchFile(j job, buf []byte) (fileResult, []byte) {
	p := j.path
	var f fs.File
	var err error
	if j.dir != nil {
		f, err = j.dir.h.Open(j.name)
		j.dir.release()
	} else {
		f, err = s.fsys.Open(p)
	}
	if err != nil {
		return fileResult{}, buf
	}
	defer f.Close()
	data, buf, ok := s.readFile(f, buf)
	if !ok {
		return fileResult{}, buf
	}
	if isBinary(data) {
		found := false
		_ = s.m.EachLine(s.ctx, data, func(int, int) bool { found = true; return false })
		return fileResult{binary: found}, buf
	}
	matches, _ := s.m.Matches(s.ctx, p, data, s.opt.MaxLineBytes)
	return fileResult{matches: matches}, buf
}

// readFile reads f whole into buf, and hands buf back (grown) for the next
// file; ok is false for a file not to search (too large, not regular).
//
// A file that fits in buf is read without a Stat: the read that ends it is
// the first one that does not fill what it asked for, and a file that
// says so with that read (io.EOF with the last bytes, as the agent's
// files do) costs one system call. Only a file that fills buf is looked
// at with Stat — whether it is regular and within MaxFileSize before more
// is read, and its size to grow buf to at once. Measured: fstat was 3.5%
// of the agent's CPU per search of the Go tree, where 95% of the files
// are smaller than the first buffer (64 KiB).
func (s *searcher) readFile(f fs.File, buf []byte) (data, _ []byte, ok bool) {
	buf = buf[:cap(buf)]
	maxSize := s.opt.MaxFileSize
	n, size := 0, -1
	for {
		if n == len(buf) {
			if size < 0 {
				st, err := f.Stat()
				if err != nil || !st.Mode().IsRegular() || (maxSize > 0 && st.Size() > maxSize) {
					return nil, buf[:0], false
				}
				size = int(st.Size())
			}
			// One byte more than the size, so that a file that grew
			// since is still read up to that point in one call.
			// Doubled at least: files come in no order of size, and a
			// buffer grown to each larger one in turn was reallocated
			// (and zeroed) again and again.
			grown := make([]byte, max(size+1, 2*len(buf), 64<<10))
			copy(grown, buf[:n])
			buf = grown
		}
		k, err := f.Read(buf[n:])
		n += k
		if maxSize > 0 && int64(n) > maxSize {
			return nil, buf[:0], false // it grew past the limit
		}
		// io.EOF ends the file; another error ends it too, and what
		// was read is searched.
		if err != nil || k == 0 || n == size {
			break // n == size: the whole file as Stat saw it, no read for EOF
		}
	}
	return buf[:n], buf[:0], true
}

// isBinary uses git's heuristic: a NUL byte in the first 8000 bytes.
func isBinary(b []byte) bool {
	return bytes.IndexByte(b[:min(len(b), 8000)], 0) >= 0
}

func (s *searcher) result() *Result {
	ranks := make([]int, 0, len(s.results))
	for k := range s.results {
		ranks = append(ranks, k)
	}
	slices.Sort(ranks)
	limit := s.opt.MaxResults
	res := &Result{Matches: []Match{}, Files: s.scanned, Truncated: s.stopped}
	for _, k := range ranks {
		r := s.results[k]
		if r.binary {
			res.SkippedBinary++
			continue
		}
		for _, m := range r.matches {
			if limit > 0 && len(res.Matches) >= limit {
				res.Truncated = true
				break
			}
			res.Matches = append(res.Matches, m)
		}
	}
	return res
}

// Matches returns one Match per line of the text file data (named p in
// the results) that holds a match, with 1-based line numbers and the line
// cut to maxLine bytes (0: whole). On ctx's end it returns what it found so
// far and ctx's error.
func (m *Matcher) Matches(ctx context.Context, p string, data []byte, maxLine int) ([]Match, error) {
	var out []Match
	line, counted := 1, 0
	err := m.EachLine(ctx, data, func(start, end int) bool {
		line += bytes.Count(data[counted:start], []byte{'\n'})
		counted = start
		text := bytes.TrimSuffix(data[start:end], []byte{'\r'})
		if maxLine > 0 && len(text) > maxLine {
			text = text[:maxLine]
			for len(text) > 0 && !utf8.Valid(text[max(0, len(text)-3):]) {
				text = text[:len(text)-1]
			}
		}
		mt := Match{Path: p, Line: line, Text: string(text)}
		if !utf8.ValidString(mt.Text) {
			mt.Text, mt.InvalidUTF8 = strings.ToValidUTF8(mt.Text, "\uFFFD"), true
		}
		out = append(out, mt)
		return true
	})
	return out, err
}
