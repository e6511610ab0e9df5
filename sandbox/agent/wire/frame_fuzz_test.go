package wire

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzReadFrame feeds arbitrary bytes to the frame decoder: it must never
// panic, never return a frame larger than MaxPayload, and every frame it
// accepts must encode back to the same bytes.
func FuzzReadFrame(f *testing.F) {
	var seed bytes.Buffer
	_ = WriteFrame(&seed, 1, FrameRequest, []byte(`{"op":"ping"}`))
	f.Add(seed.Bytes())
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1, 12})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, 5})
	f.Add([]byte{0, 0, 0, 3, 0, 0, 0, 2, 99, 'a', 'b', 'c'})
	f.Fuzz(func(t *testing.T, in []byte) {
		fr, err := ReadFrame(bytes.NewReader(in))
		if err != nil {
			if len(in) >= HeaderSize && in[8] != 0 && in[8] <= byte(maxFrameType) && !errors.Is(err, ErrProtocol) && len(in) >= HeaderSize+int(uint32(in[0])<<24|uint32(in[1])<<16|uint32(in[2])<<8|uint32(in[3])) {
				t.Fatalf("complete, valid-looking frame rejected: %v", err)
			}
			return
		}
		if len(fr.Payload) > MaxPayload {
			t.Fatalf("payload of %d bytes accepted", len(fr.Payload))
		}
		var out bytes.Buffer
		if err := WriteFrame(&out, fr.ID, fr.Type, fr.Payload); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), in[:out.Len()]) {
			t.Fatal("re-encoded frame differs from the input")
		}
	})
}
