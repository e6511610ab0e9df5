package schemas

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWriteFileIsStableAndReadable(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "run.json")
	schema := json.RawMessage(`{"type":"object","properties":{"q":{"type":"string","description":"a \u003c b & c"}},"additionalProperties":false}`)
	if err := WriteFile(path, schema); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "type": "object",
  "properties": {
    "q": {
      "type": "string",
      "description": "a < b & c"
    }
  },
  "additionalProperties": false
}
`
	if string(got) != want {
		t.Errorf("file content:\n%s\nwant:\n%s", got, want)
	}
	if err := CompareFile(path, schema); err != nil {
		t.Errorf("fresh file reported stale: %v", err)
	}

	// Regenerating the same content leaves the file alone.
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, schema); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(path); !st.ModTime().Equal(old) {
		t.Error("WriteFile rewrote an unchanged file")
	}
}

func TestCompareFileReportsStaleness(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.json")
	v1 := json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"}}}`)
	v2 := json.RawMessage(`{"type":"object","properties":{"a":{"type":"integer"}}}`)

	err := CompareFile(path, v1)
	if !errors.Is(err, ErrStale) || !strings.Contains(err.Error(), "file missing") {
		t.Errorf("missing file: got %v", err)
	}
	if err := WriteFile(path, v1); err != nil {
		t.Fatal(err)
	}
	err = CompareFile(path, v2)
	if !errors.Is(err, ErrStale) || !strings.Contains(err.Error(), `a.json:5: have "      \"type\": \"string\"", want "      \"type\": \"integer\""`) {
		t.Errorf("changed schema: got %v", err)
	}
	if err := WriteFile(path, json.RawMessage(`{"type":`)); err == nil {
		t.Error("WriteFile accepted broken JSON")
	}
}
