package broker

import (
	"context"
	"encoding/binary"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

func TestOptionsValidate(t *testing.T) {
	for name, o := range map[string]Option{
		"bad addr":      WithAddr("nope"),
		"zero brokers":  WithBrokers(0),
		"bad mechanism": WithSASL("GSSAPI", "u", "p"),
		"no user":       WithSASL("PLAIN", "", "p"),
		"tls no cert":   WithTLS(nil),
		"tiny max":      WithMaxMessageBytes(10),
	} {
		if _, err := Start(o); err == nil {
			t.Errorf("%s: Start accepted it", name)
		}
	}
}

func TestFixedAddrAndSeveralBrokers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	b, err := Start(WithAddr(net.JoinHostPort("127.0.0.1", itoa(port))), WithBrokers(2), WithTopics(4, "t"))
	if err != nil {
		t.Skipf("ports %d,%d not free: %v", port, port+1, err)
	}
	defer b.Close()
	addrs := b.Addrs()
	if len(addrs) != 2 || addrs[0] != net.JoinHostPort("127.0.0.1", itoa(port)) || addrs[1] != net.JoinHostPort("127.0.0.1", itoa(port+1)) {
		t.Fatalf("addrs %v", addrs)
	}
	conn, err := kafka.Dial("tcp", addrs[1])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ps, err := conn.ReadPartitions("t")
	if err != nil || len(ps) != 4 {
		t.Fatalf("partitions %v, %v", ps, err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestCutRestore(t *testing.T) {
	b, err := Start(WithTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	addr := b.Addrs()[0]
	conn, err := kafka.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ReadPartitions("t"); err != nil {
		t.Fatal(err)
	}
	b.Cut()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.ReadPartitions("t"); err == nil {
		t.Fatal("an open connection survived Cut")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if c, err := (&kafka.Dialer{}).DialContext(ctx, "tcp", addr); err == nil {
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.ReadPartitions("t"); err == nil {
			t.Fatal("a new connection worked during Cut")
		}
		c.Close()
	}
	b.Restore()
	c2, err := kafka.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if ps, err := c2.ReadPartitions("t"); err != nil || len(ps) != 1 {
		t.Fatalf("after Restore: %v %v", ps, err)
	}
}

func TestPatchAPIVersions(t *testing.T) {
	entry := func(key, lo, hi int16) []byte {
		b := make([]byte, 6)
		binary.BigEndian.PutUint16(b, uint16(key))
		binary.BigEndian.PutUint16(b[2:], uint16(lo))
		binary.BigEndian.PutUint16(b[4:], uint16(hi))
		return b
	}
	// v0-v2: int32 count, 6-byte entries.
	v2 := []byte{0, 0, 0, 0, 0, 3}
	v2 = append(v2, entry(0, 0, 9)...)
	v2 = append(v2, entry(17, 1, 1)...)
	v2 = append(v2, entry(18, 0, 4)...)
	patchAPIVersions(v2, 2)
	if lo := binary.BigEndian.Uint16(v2[6+6+2:]); lo != 0 {
		t.Fatalf("v2: SaslHandshake min = %d, want 0", lo)
	}
	if lo := binary.BigEndian.Uint16(v2[6+2:]); lo != 0 || binary.BigEndian.Uint16(v2[6+12+2:]) != 0 {
		t.Fatal("v2: other entries changed")
	}
	// v3: compact array (count+1), each entry followed by tagged fields;
	// the first entry carries one tagged field of 2 bytes.
	v3 := []byte{0, 0, 3}
	v3 = append(v3, entry(3, 0, 12)...)
	v3 = append(v3, 1, 5, 2, 0xAA, 0xBB) // 1 tag: id 5, size 2
	v3 = append(v3, entry(17, 1, 1)...)
	v3 = append(v3, 0)
	patchAPIVersions(v3, 3)
	if lo := binary.BigEndian.Uint16(v3[3+6+5+2:]); lo != 0 {
		t.Fatalf("v3: SaslHandshake min = %d, want 0", lo)
	}
	// Truncated input is left alone without panicking.
	patchAPIVersions(v3[:5], 3)
	patchAPIVersions([]byte{0}, 0)
}
