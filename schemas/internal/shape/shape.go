// Package shape checks an Avro binary body against its schema before the
// body is decoded.
//
// Guarantees: Check reads every length and block count and refuses one that
// does not fit in the bytes that remain, so a hostile length (say 2^62) is
// refused before anything is allocated; its errors name the place in the
// record (fields and item indexes) where the body went wrong. Compile takes
// the schema in Parsing Canonical Form. The schemas codecs run Check on
// every body before goavro decodes it.
package shape

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// Shape is a compiled Avro schema used to check a binary body before it is
// decoded: every length and block count must fit in the bytes that remain,
// so a hostile length (say 2^62) is refused before anything is allocated.
type Shape struct {
	kind     string   // Avro type name: null, boolean, int, long, float, double, bytes, string, record, array, union, enum, fixed
	name     string   // field name or type name, for error details
	fields   []*Shape // record
	items    *Shape   // array
	branches []*Shape // union
	size     int      // fixed
	symbols  int      // enum
	minBytes int      // fewest bytes one encoded value can take
}

// Compile builds a shape from a schema in Parsing Canonical Form.
func Compile(canonical string) (*Shape, error) {
	var v any
	if err := json.Unmarshal([]byte(canonical), &v); err != nil {
		return nil, fmt.Errorf("parse canonical schema: %w", err)
	}
	named := map[string]*Shape{}
	return compileNode(v, named)
}

func compileNode(v any, named map[string]*Shape) (*Shape, error) {
	switch t := v.(type) {
	case string:
		switch t {
		case "null":
			return &Shape{kind: t}, nil
		case "boolean":
			return &Shape{kind: t, minBytes: 1}, nil
		case "int", "long", "bytes", "string":
			return &Shape{kind: t, minBytes: 1}, nil
		case "float":
			return &Shape{kind: t, minBytes: 4}, nil
		case "double":
			return &Shape{kind: t, minBytes: 8}, nil
		}
		if s, ok := named[t]; ok {
			return s, nil
		}
		return nil, fmt.Errorf("unknown type %q", t)
	case []any:
		u := &Shape{kind: "union", minBytes: 1}
		for _, b := range t {
			s, err := compileNode(b, named)
			if err != nil {
				return nil, err
			}
			u.branches = append(u.branches, s)
		}
		return u, nil
	case map[string]any:
		kind, _ := t["type"].(string)
		name, _ := t["name"].(string)
		switch kind {
		case "record":
			s := &Shape{kind: kind, name: name}
			fields, _ := t["fields"].([]any)
			for _, f := range fields {
				fm, ok := f.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("record %s: malformed field", name)
				}
				fs, err := compileNode(fm["type"], named)
				if err != nil {
					return nil, fmt.Errorf("record %s: %w", name, err)
				}
				fname, _ := fm["name"].(string)
				s.fields = append(s.fields, &Shape{kind: "field", name: fname, items: fs})
				s.minBytes += fs.minBytes
			}
			named[name] = s
			return s, nil
		case "array":
			it, err := compileNode(t["items"], named)
			if err != nil {
				return nil, err
			}
			return &Shape{kind: kind, items: it, minBytes: 1}, nil
		case "enum":
			syms, _ := t["symbols"].([]any)
			s := &Shape{kind: kind, name: name, symbols: len(syms), minBytes: 1}
			named[name] = s
			return s, nil
		case "fixed":
			size, _ := t["size"].(float64)
			s := &Shape{kind: kind, name: name, size: int(size), minBytes: int(size)}
			named[name] = s
			return s, nil
		case "map":
			return nil, fmt.Errorf("map types are not used by creditflow schemas")
		default:
			return compileNode(kind, named)
		}
	}
	return nil, fmt.Errorf("malformed schema node %T", v)
}

// readVarint reads one zig-zag varint of at most maxBytes bytes.
func readVarint(b []byte, pos, maxBytes int) (int64, int, error) {
	var u uint64
	var shift uint
	for i := 0; i < maxBytes; i++ {
		if pos >= len(b) {
			return 0, pos, fmt.Errorf("varint runs past the end at byte %d", pos)
		}
		c := b[pos]
		pos++
		u |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return int64(u>>1) ^ -int64(u&1), pos, nil
		}
		shift += 7
	}
	return 0, pos, fmt.Errorf("varint longer than %d bytes at byte %d", maxBytes, pos)
}

// maxItemsZeroSize caps block counts of arrays whose items may encode to zero
// bytes (only possible with "null" items, which creditflow schemas do not use).
const maxItemsZeroSize = 1 << 16

// Path names the value being checked, formatted only when an error
// needs it: a root name, then fields and item indexes pushed and popped as
// Check descends.
type Path struct {
	root  string
	elems []pathElem
}

type pathElem struct {
	field string // "" for an item
	index int64
}

// NewPath is the path of a record named root.
func NewPath(root string) Path {
	return Path{root: root, elems: make([]pathElem, 0, 8)}
}

// String is the path as a name: root.field[index]...
func (p *Path) String() string {
	out := p.root
	for _, e := range p.elems {
		if e.field == "" {
			out = fmt.Sprintf("%s[%d]", out, e.index)
		} else {
			out += "." + e.field
		}
	}
	return out
}

// Check walks one value of shape s starting at pos and returns the position
// after it.
func (s *Shape) Check(b []byte, pos int, at *Path) (int, error) {
	switch s.kind {
	case "null":
		return pos, nil
	case "boolean":
		if pos >= len(b) {
			return pos, checkMsg(at, "boolean past the end")
		}
		if b[pos] > 1 {
			return pos, checkErr1(at, "boolean byte %#x is neither 0 nor 1", int64(b[pos]))
		}
		return pos + 1, nil
	case "int", "enum":
		v, p, err := readVarint(b, pos, 5)
		if err != nil {
			return p, checkWrap(at, "", err)
		}
		if v < math.MinInt32 || v > math.MaxInt32 {
			return p, checkErr1(at, "int %d out of 32-bit range", v)
		}
		if s.kind == "enum" && (v < 0 || v >= int64(s.symbols)) {
			return p, checkErr1(at, "enum index %d out of range", v)
		}
		return p, nil
	case "long":
		_, p, err := readVarint(b, pos, 10)
		if err != nil {
			return p, checkWrap(at, "", err)
		}
		return p, nil
	case "float", "double", "fixed":
		n := s.minBytes
		if len(b)-pos < n {
			return pos, checkErr2(at, s.kind+" needs %d bytes, %d remain", int64(n), int64(len(b)-pos))
		}
		return pos + n, nil
	case "bytes", "string":
		n, p, err := readVarint(b, pos, 10)
		if err != nil {
			return p, checkWrap(at, "length: ", err)
		}
		if n < 0 || n > int64(len(b)-p) {
			return p, checkErr2(at, "length %d does not fit in the %d bytes that remain", n, int64(len(b)-p))
		}
		return p + int(n), nil
	case "union":
		i, p, err := readVarint(b, pos, 10)
		if err != nil {
			return p, checkWrap(at, "union index: ", err)
		}
		if i < 0 || i >= int64(len(s.branches)) {
			return p, checkErr2(at, "union index %d out of range [0, %d)", i, int64(len(s.branches)))
		}
		return s.branches[i].Check(b, p, at)
	case "record":
		var err error
		for _, f := range s.fields {
			at.elems = append(at.elems, pathElem{field: f.name})
			if pos, err = f.items.Check(b, pos, at); err != nil {
				return pos, err
			}
			at.elems = at.elems[:len(at.elems)-1]
		}
		return pos, nil
	case "array":
		item := int64(0)
		for {
			n, p, err := readVarint(b, pos, 10)
			if err != nil {
				return p, checkWrap(at, "block count: ", err)
			}
			pos = p
			if n == 0 {
				return pos, nil
			}
			if n < 0 {
				if n == math.MinInt64 {
					return pos, checkMsg(at, "block count out of range")
				}
				n = -n
				size, p, err := readVarint(b, pos, 10)
				if err != nil {
					return p, checkWrap(at, "block size: ", err)
				}
				if size < 0 || size > int64(len(b)-p) {
					return p, checkErr2(at, "block size %d does not fit in the %d bytes that remain", size, int64(len(b)-p))
				}
				pos = p
			}
			limit := int64(maxItemsZeroSize)
			if s.items.minBytes > 0 {
				limit = int64((len(b) - pos) / s.items.minBytes)
			}
			if n > limit {
				return pos, checkErr2(at, "block count %d does not fit in the %d bytes that remain", n, int64(len(b)-pos))
			}
			for i := int64(0); i < n; i++ {
				at.elems = append(at.elems, pathElem{index: item})
				if pos, err = s.items.Check(b, pos, at); err != nil {
					return pos, err
				}
				at.elems = at.elems[:len(at.elems)-1]
				item++
			}
		}
	}
	return pos, checkMsg(at, "unsupported schema kind "+strconv.Quote(s.kind))
}

// The errors of check, built out of line: formatting them in check itself
// gave it a 960-byte frame, zeroed on each of its dozens of calls per record.

//go:noinline
func checkMsg(at *Path, msg string) error {
	return fmt.Errorf("%s: %s", at.String(), msg)
}

//go:noinline
func checkWrap(at *Path, prefix string, err error) error {
	return fmt.Errorf("%s: %s%w", at.String(), prefix, err)
}

//go:noinline
func checkErr1(at *Path, format string, v int64) error {
	return fmt.Errorf("%s: "+format, at.String(), v)
}

//go:noinline
func checkErr2(at *Path, format string, v, w int64) error {
	return fmt.Errorf("%s: "+format, at.String(), v, w)
}
