package wire

import (
	"encoding/json"
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox/driver"
)

// TestErrorCodesCrossTheStreamAsProtocolTwoHasThem: a reply's error
// carries the driver's code (the one list) in Go, and on the stream the
// short form protocol version 2 defined ("NOT_FOUND"), so agents already
// built and clients of either side still agree.
func TestErrorCodesCrossTheStreamAsProtocolTwoHasThem(t *testing.T) {
	for _, c := range driver.Codes() {
		b, err := json.Marshal(Reply{Error: &WireError{Code: c.Code, Message: "m"}})
		if err != nil {
			t.Fatal(err)
		}
		short := string(c.Code)[len("SBX_"):]
		if want := `{"error":{"code":"` + short + `","message":"m"}}`; string(b) != want {
			t.Errorf("%s on the stream = %s, want %s", c.Code, b, want)
		}
		var back Reply
		if err := json.Unmarshal(b, &back); err != nil || back.Error == nil || back.Error.Code != c.Code || back.Error.Message != "m" {
			t.Errorf("%s read back as %+v, %v", c.Code, back.Error, err)
		}
	}
	// A code no version of the list has stays as sent, for the client to
	// report as unknown.
	var r Reply
	if err := json.Unmarshal([]byte(`{"error":{"code":"FROM_THE_FUTURE","message":"m"}}`), &r); err != nil || r.Error.Code != "FROM_THE_FUTURE" || r.Error.Code.Known() {
		t.Errorf("unknown code read as %+v, %v", r.Error, err)
	}
}
