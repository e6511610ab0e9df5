// Package wire is the agent protocol's vocabulary, shared by both ends:
// the frame format (ReadFrame, WriteFrame), the frame types, the request,
// reply and event structs of every operation, the error codes and the
// flow-control constants. It is portable Go with no system calls, so the
// client (package agent), the server (package agent/server) and any other
// implementation of either end speak exactly the same protocol.
//
// Wire format (version 2): every frame is a 9-byte header — payload length
// (uint32, big endian), request id (uint32), frame type (uint8) — followed by
// the payload. JSON payloads carry requests, replies and events; data frames
// carry raw bytes. A reply may be preceded by one Blob frame: raw bytes that
// belong to the reply (a file's contents), written together with it, so a
// small read costs one round trip and no base64 or JSON scanning of the
// data. Data in either direction is flow controlled per request: a sender
// keeps at most Window unacknowledged data bytes in flight and the
// receiver returns credit with Ack frames as it consumes them, so one
// flooding process cannot starve the others on the shared stream or grow a
// buffer without bound.
//
// Egress by name (Hello.Proxy): the agent listens on the sandbox's own
// loopback and carries each accepted connection to the client as a
// tunnelled connection (Conn* frames, ids of their own, flow controlled
// per connection). The agent only relays: the client side (package
// sandbox) plays the HTTP proxy and holds the policy.
package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Version is the protocol version spoken by this package. The client sends
// it in Hello; an agent of another version refuses the handshake.
const Version = 2

// Frame size and flow-control constants.
const (
	// HeaderSize is the size of a frame's header.
	HeaderSize = 9
	// MaxPayload bounds one frame. Larger frames are a protocol error,
	// which keeps a hostile agent from making the host allocate freely.
	MaxPayload = 16 << 20
	// ChunkSize is the largest data frame either side sends.
	ChunkSize = 32 << 10
	// Window is the per-request credit for data frames, in bytes.
	Window = 1 << 20
)

// FrameType says what a frame's payload is.
type FrameType uint8

// Frame types. Client->agent: Hello, Request, Stdin, StdinClose, Cancel,
// Signal, Ack. Agent->client: HelloOK, Reply, Stdout, Stderr, Event, Ack, Blob,
// ConnOpen, ConnHandoff. Either way: ConnData, ConnAck, ConnEOF, ConnClose (package agent/internal/tunnel;
// their id is a connection id the agent chose, not a request id).
const (
	FrameHello      FrameType = 1  // JSON Hello
	FrameHelloOK    FrameType = 2  // JSON HelloReply
	FrameRequest    FrameType = 3  // JSON Request
	FrameReply      FrameType = 4  // JSON Reply; ends the request id
	FrameStdout     FrameType = 5  // raw bytes
	FrameStderr     FrameType = 6  // raw bytes
	FrameEvent      FrameType = 7  // JSON Event
	FrameStdin      FrameType = 8  // raw bytes to the request's process or upload
	FrameStdinClose FrameType = 9  // no payload: end of input
	FrameCancel     FrameType = 10 // no payload: abandon the request (kills its process)
	FrameSignal     FrameType = 11 // JSON SignalRequest
	FrameAck        FrameType = 12 // uint32 count of data bytes consumed
	FrameBlob       FrameType = 13 // raw bytes of the coming reply's result (not flow controlled)
	FrameConnOpen   FrameType = 14 // no payload: the egress proxy accepted connection id
	FrameConnData   FrameType = 15 // raw bytes of a connection (flow controlled by ConnAck)
	FrameConnAck    FrameType = 16 // uint32 count of connection bytes consumed
	FrameConnEOF    FrameType = 17 // no payload: the sender writes no more to the connection
	FrameConnClose  FrameType = 18 // no payload: the sender dropped the connection
	// FrameConnHandoff (agent->client, Hello.ProxyHandoff): no payload;
	// the connection's socket itself comes with the frame's bytes as a
	// descriptor (SCM_RIGHTS), and the client serves it directly. A
	// ConnClose from the client ends it for the agent's count.
	FrameConnHandoff FrameType = 19
	maxFrameType     FrameType = 19
)

func (t FrameType) String() string {
	names := [...]string{"invalid", "hello", "hello-ok", "request", "reply", "stdout", "stderr", "event", "stdin", "stdin-close", "cancel", "signal", "ack", "blob",
		"conn-open", "conn-data", "conn-ack", "conn-eof", "conn-close", "conn-handoff"}
	if int(t) < len(names) {
		return names[t]
	}
	return fmt.Sprintf("frame(%d)", uint8(t))
}

// Frame is one decoded protocol frame.
type Frame struct {
	ID      uint32
	Type    FrameType
	Payload []byte
}

// ErrProtocol reports a malformed frame or an unexpected message.
var ErrProtocol = errors.New("agent protocol error")

// ReadFrame decodes one frame from r. It never allocates more than
// MaxPayload bytes for a frame and rejects unknown frame types.
func ReadFrame(r io.Reader) (Frame, error) {
	var h [HeaderSize]byte
	if br, ok := r.(*bufio.Reader); ok {
		// From the buffer itself: h escapes through io.ReadFull's
		// interface, an allocation per frame.
		p, err := br.Peek(HeaderSize)
		if len(p) < HeaderSize {
			if err == io.EOF && len(p) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return Frame{}, err
		}
		copy(h[:], p)
		br.Discard(HeaderSize)
	} else {
		hb := make([]byte, HeaderSize)
		if _, err := io.ReadFull(r, hb); err != nil {
			return Frame{}, err
		}
		copy(h[:], hb)
	}
	n := binary.BigEndian.Uint32(h[0:4])
	f := Frame{ID: binary.BigEndian.Uint32(h[4:8]), Type: FrameType(h[8])}
	if f.Type == 0 || f.Type > maxFrameType {
		return Frame{}, fmt.Errorf("%w: unknown frame type %d", ErrProtocol, h[8])
	}
	if n > MaxPayload {
		return Frame{}, fmt.Errorf("%w: frame of %d bytes exceeds the %d byte limit", ErrProtocol, n, MaxPayload)
	}
	if n > 0 {
		f.Payload = make([]byte, n)
		if _, err := io.ReadFull(r, f.Payload); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return Frame{}, err
		}
	}
	return f, nil
}

// AppendFrame encodes one frame into buf.
func AppendFrame(buf []byte, id uint32, t FrameType, payload []byte) []byte {
	return append(AppendHeader(buf, id, t, len(payload)), payload...)
}

// AppendHeader encodes the header of a frame with an n-byte payload.
func AppendHeader(buf []byte, id uint32, t FrameType, n int) []byte {
	var h [HeaderSize]byte
	binary.BigEndian.PutUint32(h[0:4], uint32(n))
	binary.BigEndian.PutUint32(h[4:8], id)
	h[8] = byte(t)
	return append(buf, h[:]...)
}

// WriteFrame encodes one frame to w in a single Write call.
func WriteFrame(w io.Writer, id uint32, t FrameType, payload []byte) error {
	if len(payload) > MaxPayload {
		return fmt.Errorf("%w: frame of %d bytes exceeds the %d byte limit", ErrProtocol, len(payload), MaxPayload)
	}
	_, err := w.Write(AppendFrame(make([]byte, 0, HeaderSize+len(payload)), id, t, payload))
	return err
}

// AckPayload is the payload of an Ack or ConnAck frame returning n bytes of
// credit.
func AckPayload(n int) []byte {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(n))
	return b[:]
}

// ParseAck decodes an Ack or ConnAck payload.
func ParseAck(p []byte) (int, error) {
	if len(p) != 4 {
		return 0, fmt.Errorf("%w: ack of %d bytes", ErrProtocol, len(p))
	}
	return int(binary.BigEndian.Uint32(p)), nil
}

// NewFrameReader wraps r with a buffer sized for typical small frames.
func NewFrameReader(r io.Reader) *bufio.Reader { return bufio.NewReaderSize(r, 64<<10) }

// FrameReader reads frames as ReadFrame does, but resumably: a read that
// fails part way (a deadline set to interrupt a blocked read, say) loses
// nothing, and the next Next continues the same frame. The client's
// reader role passes between goroutines, and one of them may be
// interrupted while the next must find the stream intact.
type FrameReader struct {
	br      *bufio.Reader
	f       Frame // the frame being read, its payload filled up to got
	got     int
	pending bool // f's header is consumed; its payload is being read
}

// NewResumableFrameReader returns a FrameReader of r (buffered as
// NewFrameReader buffers).
func NewResumableFrameReader(r io.Reader) *FrameReader {
	return &FrameReader{br: NewFrameReader(r)}
}

// Next returns the next frame. An error other than a protocol error is
// r's: after a temporary one (a deadline), Next may be called again.
func (fr *FrameReader) Next() (Frame, error) {
	if !fr.pending {
		p, err := fr.br.Peek(HeaderSize)
		if len(p) < HeaderSize {
			if err == io.EOF && len(p) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return Frame{}, err
		}
		n := binary.BigEndian.Uint32(p[0:4])
		f := Frame{ID: binary.BigEndian.Uint32(p[4:8]), Type: FrameType(p[8])}
		if f.Type == 0 || f.Type > maxFrameType {
			return Frame{}, fmt.Errorf("%w: unknown frame type %d", ErrProtocol, p[8])
		}
		if n > MaxPayload {
			return Frame{}, fmt.Errorf("%w: frame of %d bytes exceeds the %d byte limit", ErrProtocol, n, MaxPayload)
		}
		fr.br.Discard(HeaderSize)
		if n > 0 {
			f.Payload = make([]byte, n)
		}
		fr.f, fr.got, fr.pending = f, 0, true
	}
	for fr.got < len(fr.f.Payload) {
		m, err := fr.br.Read(fr.f.Payload[fr.got:])
		fr.got += m
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return Frame{}, err
		}
	}
	f := fr.f
	fr.f, fr.pending = Frame{}, false
	return f, nil
}

// ReplyPrefix starts the JSON of a successful Reply: the server writes one
// as ReplyPrefix + result + "}", and the client cuts the result out of that
// shape without scanning it (its consumer decodes, and so validates, it).
const ReplyPrefix = `{"result":`

// DefaultOutputFileLimit is the cap on an ExecRequest.OutputFile when the
// request names none.
const DefaultOutputFileLimit = 64 << 20

// MaxTunnelConns bounds the tunnelled connections open at once. The agent
// stops accepting at MaxProxyConns (below it); more at the host is a
// protocol violation.
const MaxTunnelConns = 256

// MaxProxyConns bounds the connections the agent carries at once; further
// connections wait in the kernel's accept queue. The host's own limit
// (its policy's, answered with an HTTP error) must not be higher.
const MaxProxyConns = MaxTunnelConns * 3 / 4
