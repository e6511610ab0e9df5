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
	"syscall"
	"time"
	"unicode/utf8"
)

// ErrResources is wrapped by the error Search returns when a file or
// directory could not be opened or listed for want of a system resource
// (descriptors: EMFILE, ENFILE; kernel memory: ENOMEM, ENOBUFS) even after
// waiting for some to be given back. Such a file is not unreadable, only
// not readable now: passing it over, as an unreadable file is, would
// return a result that says it is complete and is not (found in review: a
// sandbox at its lowest open-files limit lost half its matches that way).
var ErrResources = errors.New("out of system resources")

// lacksResources reports whether err is a shortage that passes (see
// ErrResources), not a property of the file.
func lacksResources(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.ENOBUFS)
}

// Retries after a shortage (lacksResources): the first after
// firstRetryDelay, each after twice the one before, the last after
// lastRetryDelay (about a quarter of a second in all). The search's own
// workers give their descriptors back within a file's read (microseconds),
// other requests of the agent within theirs; a shortage that outlasts the
// retries is someone else's (a command holding the descriptors) and ends
// the search with ErrResources.
const (
	firstRetryDelay = time.Millisecond
	lastRetryDelay  = 128 * time.Millisecond
)

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
// below it are passed over, except where the error is a shortage of
// system resources that outlasts a few retries: then the search ends with
// an error that wraps ErrResources (and the error) — a search never
// passes over a file it could read. When ctx ends, Search returns what it counted
// (Files) and ctx's error, after each worker has stopped inside the file
// it was reading.
//
// Files are read and matched by Options.Workers goroutines while one walks
// the tree in order, handing them out with their rank; the matches are put
// back in that order at the end.
func Search(ctx context.Context, fsys fs.ReadDirFS, root string, m *Matcher, opt Options) (*Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := &searcher{ctx: ctx, cancel: cancel, fsys: fsys, m: m, opt: opt, results: map[int]fileResult{}}
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
	q.close()
	wg.Wait()
	if walkErr != nil && walkErr != errStop {
		return nil, walkErr
	}
	if s.failed != nil { // a worker's shortage (retryOpen)
		return nil, s.failed
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
}

type fileResult struct {
	matches []Match
	binary  bool
}

type searcher struct {
	ctx    context.Context
	cancel context.CancelFunc // ends the search when a worker fails (failed)
	fsys   fs.ReadDirFS
	m      *Matcher
	opt    Options
	files  *batchQueue
	batch  []job
	rank   int
	// stopped: the walk ended at MaxResults with files left.
	stopped bool

	mu      sync.Mutex
	results map[int]fileResult // by rank, files that matched
	total   int                // matching lines in results
	scanned int
	failed  error // why a worker ended the search (ErrResources)
}

func (s *searcher) walkRoot(root string) error {
	st, err := fs.Stat(s.fsys, root)
	if err != nil && lacksResources(err) {
		err = s.retry(root, func() (err error) { st, err = fs.Stat(s.fsys, root); return err })
	}
	if err != nil {
		return err
	}
	if !st.IsDir() {
		if st.Mode().IsRegular() {
			return s.offer(root, path.Base(root))
		}
		return nil
	}
	return s.walkDir(root, true)
}

// walkDir hands out the files below dir in walk order.
//
// It holds no descriptor while it walks (a directory is listed and closed
// before its entries are looked at): a walk that kept each directory open
// to open its files through it (openat2 on one name instead of a path)
// ran a sandbox at its lowest open-files limit out of descriptors (found
// in review), for a saving its author measured within noise over the Go
// tree, and measured again in review's fix: see the commit.
func (s *searcher) walkDir(dir string, root bool) error {
	ents, err := s.fsys.ReadDir(dir)
	if err != nil && lacksResources(err) {
		err = s.retry(dir, func() (err error) { ents, err = s.fsys.ReadDir(dir); return err })
		if errors.Is(err, ErrResources) {
			return err
		}
	}
	if err != nil && root {
		return err
	}
	if !slices.IsSortedFunc(ents, byName) {
		slices.SortFunc(ents, byName)
	}
	for _, d := range ents {
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
		if err := s.offer(p, name); err != nil {
			return err
		}
	}
	return nil
}

// retry calls op again after a shortage of resources (lacksResources)
// until it succeeds, fails otherwise, or the shortage outlasts the
// retries: then it returns an error that wraps ErrResources and op's
// error. p names what op opens, for the error.
func (s *searcher) retry(p string, op func() error) error {
	var err error
	for delay := firstRetryDelay; delay <= lastRetryDelay; delay *= 2 {
		t := time.NewTimer(delay)
		select {
		case <-s.ctx.Done():
			t.Stop()
			return errStop
		case <-t.C:
		}
		if err = op(); err == nil || !lacksResources(err) {
			return err
		}
	}
	return &resourceError{path: p, err: err}
}

// resourceError is a shortage that outlasted the retries (ErrResources).
type resourceError struct {
	path string
	err  error
}

func (e *resourceError) Error() string {
	return "searching " + e.path + ": " + ErrResources.Error() + ": " + e.err.Error()
}

func (e *resourceError) Unwrap() []error { return []error{ErrResources, e.err} }

func byName(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) }

// offer hands the file p (named name in its directory) to a worker,
// unless it is not selected or enough matches are certain.
func (s *searcher) offer(p, name string) error {
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
// worker).
//
// Not a sync.Pool: a pool drops everything it holds when GOMAXPROCS
// changes, and the agent changes it for every search (widenProcs), so each
// search allocated its buffers again (8 MB per search of the Go tree, and
// a garbage collection with its stop-the-world phases in every search).
// Nor held weakly: the collection that a search's other allocations start
// freed them as often. They are kept until no search has used them for
// keepReadBufs, as long as a pool would keep them in an idle agent (the
// runtime collects at least every two minutes).
//
// What is kept is bounded in bytes, not in buffers: the agent runs inside
// the sandbox's memory limit, and a search has a worker per CPU, so a
// bound of 64 buffers of up to 4 MiB each let one search of a tree of
// 1-4 MiB files on a 64-CPU host pin 194 MiB for a minute (found in
// review), enough for the next command of a sandbox limited to 256 MiB to
// be killed. maxKeptBufBytes holds the two buffers of a 2-CPU agent
// searching the Go tree (its largest file, 3 MB, grows a buffer to 4 MiB);
// a buffer larger than maxPooledBuf, or one that does not fit, is left to
// the collector.
var readBufs struct {
	sync.Mutex
	free  []*[]byte
	bytes int         // the capacity of the buffers in free
	timer *time.Timer // empties free after keepReadBufs unused
}

const (
	maxPooledBuf    = 4 << 20
	maxKeptBufBytes = 8 << 20
	keepReadBufs    = time.Minute
)

// getReadBuf hands out the largest buffer kept, or a new one.
func getReadBuf() *[]byte {
	readBufs.Lock()
	defer readBufs.Unlock()
	if n := len(readBufs.free); n > 0 {
		big := n - 1
		for i, bp := range readBufs.free {
			if cap(*bp) > cap(*readBufs.free[big]) {
				big = i
			}
		}
		bp := readBufs.free[big]
		readBufs.free[big] = readBufs.free[n-1]
		readBufs.free[n-1] = nil
		readBufs.free = readBufs.free[:n-1]
		readBufs.bytes -= cap(*bp)
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
	if readBufs.bytes+cap(*bp) > maxKeptBufBytes {
		return
	}
	readBufs.free = append(readBufs.free, bp)
	readBufs.bytes += cap(*bp)
	if readBufs.timer == nil {
		readBufs.timer = time.AfterFunc(keepReadBufs, func() {
			readBufs.Lock()
			clear(readBufs.free)
			readBufs.free = readBufs.free[:0]
			readBufs.bytes = 0
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
		for _, j := range batch {
			if s.ctx.Err() != nil {
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
	f, err := s.fsys.Open(p)
	if err != nil && lacksResources(err) {
		err = s.retry(p, func() (err error) { f, err = s.fsys.Open(p); return err })
		if errors.Is(err, ErrResources) {
			s.mu.Lock()
			if s.failed == nil {
				s.failed = err
			}
			s.mu.Unlock()
			s.cancel()
			return fileResult{}, buf
		}
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
