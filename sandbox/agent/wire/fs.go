package wire

// FSReadRequest reads a file (op fs.read). With Limit > 0 it returns lines
// [Offset, Offset+Limit); otherwise the whole file up to MaxBytes.
type FSReadRequest struct {
	Path     string `json:"path"`
	Offset   int    `json:"offset,omitempty"`
	Limit    int    `json:"limit,omitempty"`
	MaxBytes int64  `json:"max_bytes,omitempty"`
}

// FSReadReply is the content read.
type FSReadReply struct {
	Data   []byte `json:"data"`
	Size   int64  `json:"size"`
	Binary bool   `json:"binary,omitempty"`
	// InBlob says Data travelled as the reply's Blob frame rather than in
	// the JSON (the client fills Data from it).
	InBlob bool `json:"in_blob,omitempty"`
	// Lines is the number of lines returned in line mode; More says lines
	// remain after them.
	Lines int  `json:"lines,omitempty"`
	More  bool `json:"more,omitempty"`
	// Truncated says MaxBytes cut the content.
	Truncated bool `json:"truncated,omitempty"`
}

// ToBlob moves the contents out of the JSON reply into a blob that travels
// raw beside it (see FrameBlob).
func (r FSReadReply) ToBlob() (FSReadReply, []byte) {
	if len(r.Data) == 0 || len(r.Data) > MaxPayload {
		return r, nil
	}
	b := r.Data
	r.Data, r.InBlob = nil, true
	return r, b
}

// ReceiveBlob puts contents that travelled in a Blob frame back in Data.
func (r *FSReadReply) ReceiveBlob(b []byte) {
	if r.InBlob {
		r.Data, r.InBlob = b, false
	}
}

// FSWriteRequest writes a file atomically (op fs.write) or appends to it.
type FSWriteRequest struct {
	Path   string `json:"path"`
	Data   []byte `json:"data"`
	Mode   uint32 `json:"mode,omitempty"`
	Append bool   `json:"append,omitempty"`
}

// FSEditRequest replaces an exact snippet (op fs.edit).
type FSEditRequest struct {
	Path       string `json:"path"`
	Old        string `json:"old"`
	New        string `json:"new"`
	ReplaceAll bool   `json:"replace_all,omitempty"`
}

// FSEditReply reports how many replacements were made.
type FSEditReply struct {
	Replacements int `json:"replacements"`
}

// FSPathRequest names one path (ops fs.stat, fs.mkdir, fs.remove, fs.copyout).
type FSPathRequest struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
}

// FSListRequest lists a directory (op fs.list).
type FSListRequest struct {
	Path   string `json:"path"`
	Depth  int    `json:"depth,omitempty"` // 1 = direct children (default)
	Hidden bool   `json:"hidden,omitempty"`
	Max    int    `json:"max,omitempty"`
}

// Entry describes one file.
type Entry struct {
	Path    string `json:"path"` // relative to the workspace
	Type    string `json:"type"` // file, dir, symlink, other
	Size    int64  `json:"size"`
	Mode    uint32 `json:"mode"`
	ModTime int64  `json:"mod_time"` // unix nanoseconds
	Target  string `json:"target,omitempty"`
}

// FSListReply is a listing.
type FSListReply struct {
	Entries   []Entry `json:"entries"`
	Truncated bool    `json:"truncated,omitempty"`
}

// FSMoveRequest moves or copies (ops fs.move, fs.copy).
type FSMoveRequest struct {
	From      string `json:"from"`
	To        string `json:"to"`
	Overwrite bool   `json:"overwrite,omitempty"`
}

// FSChmodRequest changes permission bits (op fs.chmod).
type FSChmodRequest struct {
	Path string `json:"path"`
	Mode uint32 `json:"mode"`
}

// FSSearchRequest searches file contents with a regular expression (op
// fs.search), line by line (a match never spans a newline).
type FSSearchRequest struct {
	Pattern    string   `json:"pattern"`
	Path       string   `json:"path,omitempty"`
	Include    []string `json:"include,omitempty"`
	Exclude    []string `json:"exclude,omitempty"`
	IgnoreCase bool     `json:"ignore_case,omitempty"`
	MaxResults int      `json:"max_results,omitempty"`
	// All also searches .git and node_modules.
	All bool `json:"all,omitempty"`
}

// Match is one matching line.
type Match struct {
	Path string `json:"path"`
	Line int    `json:"line"`
	Text string `json:"text"`
	// InvalidUTF8 says the line is not valid UTF-8: Text shows each bad
	// byte as U+FFFD.
	InvalidUTF8 bool `json:"invalid_utf8,omitempty"`
}

// FSSearchReply holds the matches in path, line order.
type FSSearchReply struct {
	Matches       []Match `json:"matches"`
	Truncated     bool    `json:"truncated,omitempty"`
	Files         int     `json:"files"`
	SkippedBinary int     `json:"skipped_binary,omitempty"`
}

// FSGlobRequest finds files by name (op fs.glob).
type FSGlobRequest struct {
	Pattern string `json:"pattern"`
	Path    string `json:"path,omitempty"`
	Max     int    `json:"max,omitempty"`
}

// FSGlobReply lists matching paths, sorted.
type FSGlobReply struct {
	Paths     []string `json:"paths"`
	Truncated bool     `json:"truncated,omitempty"`
}

// FSCopyReply reports a tar transfer (ops fs.copyin, fs.copyout).
type FSCopyReply struct {
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
}
