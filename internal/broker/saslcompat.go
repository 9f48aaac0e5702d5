package broker

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
)

// librdkafka (kcat, confluent-kafka for Python and Go, …) decides whether a
// broker supports the SASL handshake by checking that the broker accepts
// SaslHandshake version 0. The embedded broker implements only version 1
// (the one every current client uses after ApiVersions), so librdkafka
// would refuse to authenticate. compatConn rewrites the SaslHandshake entry
// of ApiVersions responses from [1,1] to [0,1] on the wire; librdkafka then
// picks version 1, which the broker implements. Nothing else is touched.

type compatListener struct{ net.Listener }

func (l compatListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &compatConn{Conn: c, apiVersions: map[int32]int16{}}, nil
}

type compatConn struct {
	net.Conn

	// read side: the request frame being passed through
	hdr     [12]byte // size(4) key(2) version(2) corr(4)
	hdrN    int
	remain  int // bytes of the current frame body still to pass through
	mu      sync.Mutex
	pending []byte // header bytes read but not yet returned

	apiMu       sync.Mutex
	apiVersions map[int32]int16 // correlation id -> ApiVersions request version
}

// Read passes requests through unchanged, noting ApiVersions requests.
func (c *compatConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	if c.remain > 0 {
		if len(p) > c.remain {
			p = p[:c.remain]
		}
		n, err := c.Conn.Read(p)
		c.remain -= n
		return n, err
	}
	// Start of a frame: read its fixed header first.
	for c.hdrN < len(c.hdr) {
		n, err := c.Conn.Read(c.hdr[c.hdrN:])
		c.hdrN += n
		if err != nil {
			if c.hdrN > 0 && err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
	}
	size := int(binary.BigEndian.Uint32(c.hdr[0:4]))
	key := int16(binary.BigEndian.Uint16(c.hdr[4:6]))
	version := int16(binary.BigEndian.Uint16(c.hdr[6:8]))
	corr := int32(binary.BigEndian.Uint32(c.hdr[8:12]))
	if key == 18 {
		c.apiMu.Lock()
		c.apiVersions[corr] = version
		c.apiMu.Unlock()
	}
	c.remain = size - 8
	c.hdrN = 0
	c.pending = append(c.pending[:0], c.hdr[:]...)
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

// Write patches ApiVersions responses; the broker writes one whole
// response frame per call.
func (c *compatConn) Write(b []byte) (int, error) {
	if len(b) >= 10 {
		corr := int32(binary.BigEndian.Uint32(b[4:8]))
		c.apiMu.Lock()
		version, ok := c.apiVersions[corr]
		delete(c.apiVersions, corr)
		c.apiMu.Unlock()
		if ok {
			patchAPIVersions(b[8:], version)
		}
	}
	return c.Conn.Write(b)
}

// patchAPIVersions lowers SaslHandshake's (key 17) minimum version to 0 in
// an ApiVersions response body. Malformed input is left alone.
func patchAPIVersions(body []byte, version int16) {
	if len(body) < 2 {
		return
	}
	off := 2 // error code
	var n int
	if version >= 3 {
		l, k := binary.Uvarint(body[off:])
		if k <= 0 || l == 0 {
			return
		}
		n, off = int(l-1), off+k
	} else {
		if len(body) < off+4 {
			return
		}
		n, off = int(int32(binary.BigEndian.Uint32(body[off:]))), off+4
	}
	for i := 0; i < n; i++ {
		if len(body) < off+6 {
			return
		}
		key := int16(binary.BigEndian.Uint16(body[off:]))
		minV := int16(binary.BigEndian.Uint16(body[off+2:]))
		if key == 17 && minV == 1 {
			binary.BigEndian.PutUint16(body[off+2:], 0)
			return
		}
		off += 6
		if version >= 3 { // skip the entry's tagged fields
			tags, k := binary.Uvarint(body[off:])
			if k <= 0 {
				return
			}
			off += k
			for j := uint64(0); j < tags; j++ {
				_, k1 := binary.Uvarint(body[off:])
				if k1 <= 0 {
					return
				}
				off += k1
				sz, k2 := binary.Uvarint(body[off:])
				if k2 <= 0 {
					return
				}
				off += k2 + int(sz)
			}
		}
	}
}
