package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// Format returns schema in the stable on-disk form: keys in their original order, two-space
// indent, no HTML escaping, one trailing newline. The same schema always gives the same bytes,
// so generated files diff cleanly and a staleness test can compare bytes.
func Format(schema json.RawMessage) ([]byte, error) {
	tree, err := parseTree(schema)
	if err != nil {
		return nil, fmt.Errorf("schemas: schema is not valid JSON: %w", err)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, encodeTree(tree), "", "  "); err != nil {
		return nil, fmt.Errorf("schemas: %w", err)
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// WriteFile writes schema to path in the [Format] form. It is meant for `go generate`
// programs that keep schemas/*.json in step with the Go types. The file is written only when
// its content changes, so regenerating does not touch timestamps needlessly.
func WriteFile(path string, schema json.RawMessage) error {
	want, err := Format(schema)
	if err != nil {
		return err
	}
	if have, err := os.ReadFile(path); err == nil && bytes.Equal(have, want) {
		return nil
	}
	return os.WriteFile(path, want, 0o644)
}

// ErrStale is wrapped by [CompareFile] when a file is missing or differs from the schema.
var ErrStale = errors.New("generated schema file is stale; run go generate")

// CompareFile reports whether path holds exactly what [WriteFile] would write for schema.
// A test over the generated files calls it for every schema and fails on the error, which
// names the file and the first differing line.
func CompareFile(path string, schema json.RawMessage) error {
	want, err := Format(schema)
	if err != nil {
		return err
	}
	have, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: file missing: %w", path, ErrStale)
	}
	if err != nil {
		return err
	}
	if bytes.Equal(have, want) {
		return nil
	}
	hl, wl := bytes.Split(have, []byte("\n")), bytes.Split(want, []byte("\n"))
	for i := range max(len(hl), len(wl)) {
		var h, w []byte
		if i < len(hl) {
			h = hl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if !bytes.Equal(h, w) {
			return fmt.Errorf("%s:%d: have %q, want %q: %w", path, i+1, h, w, ErrStale)
		}
	}
	return fmt.Errorf("%s: %w", path, ErrStale)
}
