package checkpoint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// This file is a small pickle virtual machine for the protocol 2–5 opcodes
// that torch.save uses for state dicts. It builds Go values and never runs
// anything: globals resolve through an allowlist to markers, and REDUCE can
// only apply the few rebuild functions implemented in globals.go.

// Resource bounds for one pickle.
const (
	maxPickleStack  = 1 << 20 // values on the stack
	maxPickleMarks  = 1 << 16 // nested MARKs
	maxPickleMemo   = 1 << 22 // memo entries
	maxPickleValues = 1 << 25 // values created in all
	maxGlobalLine   = 1 << 10 // bytes in a GLOBAL module or name line
	maxTensorDims   = 64
)

// Values the VM builds: nil, bool, int64, float64, string, []byte, pyTuple,
// *pyList, *pyDict, *pyGlobal, *pyStorage, *pyTensor.
type (
	pyTuple []any
	pyList  struct{ items []any }
	// pyDict is a dict or OrderedDict that keeps insertion order.
	pyDict struct {
		keys, vals []any
		index      map[any]int // for hashable scalar keys
	}
	// pyGlobal is an allowlisted global: a marker, never a Python object.
	pyGlobal struct {
		module, name string
		kind         globalKind
		dtype        string // for storage classes
	}
	// pyStorage is a storage loaded through BINPERSID.
	pyStorage struct {
		key   string
		dtype string
		numel int64
		src   byteSource
		name  string // for errors, e.g. "archive/data/3"
	}
	// pyTensor is the result of _rebuild_tensor_v2: a view of a storage.
	pyTensor struct {
		storage *pyStorage
		offset  int64
		shape   []int64
		stride  []int64
	}
)

// unpickler is the VM state.
type unpickler struct {
	data   []byte
	pos    int
	stack  []any
	marks  []int
	memo   map[uint64]any
	values int
	// persistentLoad resolves a BINPERSID id (torch's storage tuples).
	persistentLoad func(pid any) (any, error)
}

// errPickleTruncated is returned when an opcode's argument runs past the end.
var errPickleTruncated = errors.New("truncated pickle")

// unpickle runs the pickle in data and returns the object STOP returns.
func unpickle(data []byte, persistentLoad func(any) (any, error)) (any, error) {
	u := &unpickler{data: data, memo: make(map[uint64]any), persistentLoad: persistentLoad}
	for {
		if u.pos >= len(u.data) {
			return nil, fmt.Errorf("truncated pickle: no STOP opcode before the end (%d bytes)", len(u.data))
		}
		at := u.pos
		op := u.data[u.pos]
		u.pos++
		if op == '.' { // STOP
			if len(u.stack) == 0 || u.segmentLen() == 0 {
				return nil, fmt.Errorf("STOP with an empty stack at byte %d", at)
			}
			return u.stack[len(u.stack)-1], nil
		}
		if err := u.step(op); err != nil {
			if errors.Is(err, ErrForbiddenGlobal) {
				return nil, err
			}
			return nil, fmt.Errorf("%v at byte %d (opcode %s)", err, at, opName(op))
		}
	}
}

// opName spells an opcode for errors.
func opName(op byte) string {
	if n, ok := opcodeNames[op]; ok {
		return fmt.Sprintf("%s 0x%02x", n, op)
	}
	return fmt.Sprintf("0x%02x", op)
}

// opcodeNames names every pickle opcode, supported or not.
var opcodeNames = map[byte]string{
	'(': "MARK", '.': "STOP", '0': "POP", '1': "POP_MARK", '2': "DUP", 'F': "FLOAT", 'I': "INT",
	'J': "BININT", 'K': "BININT1", 'L': "LONG", 'M': "BININT2", 'N': "NONE", 'P': "PERSID",
	'Q': "BINPERSID", 'R': "REDUCE", 'S': "STRING", 'T': "BINSTRING", 'U': "SHORT_BINSTRING",
	'V': "UNICODE", 'X': "BINUNICODE", 'a': "APPEND", 'b': "BUILD", 'c': "GLOBAL", 'd': "DICT",
	'}': "EMPTY_DICT", 'e': "APPENDS", 'g': "GET", 'h': "BINGET", 'i': "INST", 'j': "LONG_BINGET",
	'l': "LIST", ']': "EMPTY_LIST", 'o': "OBJ", 'p': "PUT", 'q': "BINPUT", 'r': "LONG_BINPUT",
	's': "SETITEM", 't': "TUPLE", ')': "EMPTY_TUPLE", 'u': "SETITEMS", 'G': "BINFLOAT",
	0x80: "PROTO", 0x81: "NEWOBJ", 0x82: "EXT1", 0x83: "EXT2", 0x84: "EXT4", 0x85: "TUPLE1",
	0x86: "TUPLE2", 0x87: "TUPLE3", 0x88: "NEWTRUE", 0x89: "NEWFALSE", 0x8a: "LONG1", 0x8b: "LONG4",
	'B': "BINBYTES", 'C': "SHORT_BINBYTES", 0x8c: "SHORT_BINUNICODE", 0x8d: "BINUNICODE8",
	0x8e: "BINBYTES8", 0x8f: "EMPTY_SET", 0x90: "ADDITEMS", 0x91: "FROZENSET", 0x92: "NEWOBJ_EX",
	0x93: "STACK_GLOBAL", 0x94: "MEMOIZE", 0x95: "FRAME", 0x96: "BYTEARRAY8", 0x97: "NEXT_BUFFER",
	0x98: "READONLY_BUFFER",
}

// step executes one opcode (its argument bytes follow at u.pos).
func (u *unpickler) step(op byte) error {
	switch op {
	case 0x80: // PROTO
		b, err := u.read(1)
		if err != nil {
			return err
		}
		if b[0] > 5 {
			return fmt.Errorf("unsupported pickle protocol %d", b[0])
		}
	case 0x95: // FRAME: framing is only a hint for buffered readers
		if _, err := u.read(8); err != nil {
			return err
		}
	case '(': // MARK
		if len(u.marks) >= maxPickleMarks {
			return fmt.Errorf("more than %d nested MARKs", maxPickleMarks)
		}
		u.marks = append(u.marks, len(u.stack))
	case '0': // POP
		if u.segmentLen() == 0 && len(u.marks) > 0 {
			_, err := u.popMark()
			return err
		}
		_, err := u.pop()
		return err
	case '1': // POP_MARK
		_, err := u.popMark()
		return err
	case '2': // DUP
		v, err := u.top()
		if err != nil {
			return err
		}
		return u.push(v)
	case 'N':
		return u.push(nil)
	case 0x88:
		return u.push(true)
	case 0x89:
		return u.push(false)
	case 'J': // BININT
		b, err := u.read(4)
		if err != nil {
			return err
		}
		return u.push(int64(int32(binary.LittleEndian.Uint32(b))))
	case 'K': // BININT1
		b, err := u.read(1)
		if err != nil {
			return err
		}
		return u.push(int64(b[0]))
	case 'M': // BININT2
		b, err := u.read(2)
		if err != nil {
			return err
		}
		return u.push(int64(binary.LittleEndian.Uint16(b)))
	case 0x8a, 0x8b: // LONG1, LONG4
		n, err := u.readLen(op == 0x8b)
		if err != nil {
			return err
		}
		b, err := u.read(n)
		if err != nil {
			return err
		}
		v, err := decodeLong(b)
		if err != nil {
			return err
		}
		return u.push(v)
	case 'G': // BINFLOAT, big-endian
		b, err := u.read(8)
		if err != nil {
			return err
		}
		return u.push(math.Float64frombits(binary.BigEndian.Uint64(b)))
	case 'X', 0x8c, 0x8d: // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8
		b, err := u.readCounted(op)
		if err != nil {
			return err
		}
		return u.push(string(b))
	case 'B', 'C', 0x8e: // BINBYTES, SHORT_BINBYTES, BINBYTES8
		b, err := u.readCounted(op)
		if err != nil {
			return err
		}
		return u.push(append([]byte{}, b...))
	case '}':
		return u.push(newDict())
	case ']':
		return u.push(&pyList{})
	case ')':
		return u.push(pyTuple{})
	case 't': // TUPLE
		items, err := u.popMark()
		if err != nil {
			return err
		}
		return u.push(pyTuple(items))
	case 0x85, 0x86, 0x87: // TUPLE1, TUPLE2, TUPLE3
		n := int(op-0x85) + 1
		if u.segmentLen() < n {
			return fmt.Errorf("stack holds %d values, TUPLE%d needs %d", u.segmentLen(), n, n)
		}
		items := append(pyTuple{}, u.stack[len(u.stack)-n:]...)
		u.stack = u.stack[:len(u.stack)-n]
		return u.push(items)
	case 'l': // LIST
		items, err := u.popMark()
		if err != nil {
			return err
		}
		return u.push(&pyList{items: items})
	case 'd': // DICT
		items, err := u.popMark()
		if err != nil {
			return err
		}
		d := newDict()
		if err := d.setPairs(items); err != nil {
			return err
		}
		return u.push(d)
	case 'a': // APPEND
		v, err := u.pop()
		if err != nil {
			return err
		}
		return u.appendTo([]any{v})
	case 'e': // APPENDS
		items, err := u.popMark()
		if err != nil {
			return err
		}
		return u.appendTo(items)
	case 's': // SETITEM
		if u.segmentLen() < 3 {
			return fmt.Errorf("SETITEM needs a dict, a key and a value on the stack")
		}
		kv := u.stack[len(u.stack)-2:]
		u.stack = u.stack[:len(u.stack)-2]
		return u.setItems([]any{kv[0], kv[1]})
	case 'u': // SETITEMS
		items, err := u.popMark()
		if err != nil {
			return err
		}
		return u.setItems(items)
	case 'q', 'r', 0x94: // BINPUT, LONG_BINPUT, MEMOIZE
		var idx uint64
		switch op {
		case 'q':
			b, err := u.read(1)
			if err != nil {
				return err
			}
			idx = uint64(b[0])
		case 'r':
			b, err := u.read(4)
			if err != nil {
				return err
			}
			idx = uint64(binary.LittleEndian.Uint32(b))
		default:
			idx = uint64(len(u.memo))
		}
		v, err := u.top()
		if err != nil {
			return err
		}
		if _, ok := u.memo[idx]; !ok && len(u.memo) >= maxPickleMemo {
			return fmt.Errorf("more than %d memo entries", maxPickleMemo)
		}
		u.memo[idx] = v
	case 'h', 'j': // BINGET, LONG_BINGET
		var idx uint64
		if op == 'h' {
			b, err := u.read(1)
			if err != nil {
				return err
			}
			idx = uint64(b[0])
		} else {
			b, err := u.read(4)
			if err != nil {
				return err
			}
			idx = uint64(binary.LittleEndian.Uint32(b))
		}
		v, ok := u.memo[idx]
		if !ok {
			return fmt.Errorf("memo key %d is not defined", idx)
		}
		return u.push(v)
	case 'c': // GLOBAL module\nname\n
		module, err := u.readLine()
		if err != nil {
			return err
		}
		name, err := u.readLine()
		if err != nil {
			return err
		}
		g, err := findGlobal(module, name)
		if err != nil {
			return err
		}
		return u.push(g)
	case 0x93: // STACK_GLOBAL
		if u.segmentLen() < 2 {
			return fmt.Errorf("STACK_GLOBAL needs a module and a name on the stack")
		}
		module, ok1 := u.stack[len(u.stack)-2].(string)
		name, ok2 := u.stack[len(u.stack)-1].(string)
		if !ok1 || !ok2 {
			return fmt.Errorf("STACK_GLOBAL module and name must be strings")
		}
		u.stack = u.stack[:len(u.stack)-2]
		g, err := findGlobal(module, name)
		if err != nil {
			return err
		}
		return u.push(g)
	case 'R': // REDUCE
		if u.segmentLen() < 2 {
			return fmt.Errorf("REDUCE needs a callable and arguments on the stack")
		}
		fn, args := u.stack[len(u.stack)-2], u.stack[len(u.stack)-1]
		u.stack = u.stack[:len(u.stack)-2]
		argt, ok := args.(pyTuple)
		if !ok {
			return fmt.Errorf("REDUCE arguments are %s, not a tuple", typeName(args))
		}
		v, err := call(fn, argt)
		if err != nil {
			return err
		}
		return u.push(v)
	case 0x81, 0x92: // NEWOBJ, NEWOBJ_EX: cls.__new__(cls, *args)
		n := 2
		if op == 0x92 {
			n = 3
		}
		if u.segmentLen() < n {
			return fmt.Errorf("%s needs %d values on the stack", opcodeNames[op], n)
		}
		cls := u.stack[len(u.stack)-n]
		u.stack = u.stack[:len(u.stack)-n]
		if g, ok := cls.(*pyGlobal); !ok || g.kind != gOrderedDict {
			return fmt.Errorf("%s of %s is not supported (only OrderedDict)", opcodeNames[op], typeName(cls))
		}
		return u.push(newDict())
	case 'b': // BUILD
		state, err := u.pop()
		if err != nil {
			return err
		}
		obj, err := u.top()
		if err != nil {
			return err
		}
		return build(obj, state)
	case 'Q': // BINPERSID
		pid, err := u.pop()
		if err != nil {
			return err
		}
		if u.persistentLoad == nil {
			return fmt.Errorf("persistent ids are not supported here")
		}
		v, err := u.persistentLoad(pid)
		if err != nil {
			return err
		}
		return u.push(v)
	default:
		return fmt.Errorf("unsupported pickle opcode")
	}
	return nil
}

// read consumes n argument bytes.
func (u *unpickler) read(n int) ([]byte, error) {
	if n < 0 || n > len(u.data)-u.pos {
		return nil, errPickleTruncated
	}
	b := u.data[u.pos : u.pos+n]
	u.pos += n
	return b, nil
}

// readLen reads a 1-byte (or, if long, 4-byte) little-endian length.
func (u *unpickler) readLen(long bool) (int, error) {
	if !long {
		b, err := u.read(1)
		if err != nil {
			return 0, err
		}
		return int(b[0]), nil
	}
	b, err := u.read(4)
	if err != nil {
		return 0, err
	}
	n := binary.LittleEndian.Uint32(b)
	if uint64(n) > uint64(len(u.data)-u.pos) {
		return 0, errPickleTruncated
	}
	return int(n), nil
}

// readCounted reads the length-prefixed payload of a string or bytes opcode.
func (u *unpickler) readCounted(op byte) ([]byte, error) {
	var n uint64
	switch op {
	case 0x8c, 'C': // 1-byte length
		b, err := u.read(1)
		if err != nil {
			return nil, err
		}
		n = uint64(b[0])
	case 'X', 'B': // 4-byte length
		b, err := u.read(4)
		if err != nil {
			return nil, err
		}
		n = uint64(binary.LittleEndian.Uint32(b))
	default: // 8-byte length
		b, err := u.read(8)
		if err != nil {
			return nil, err
		}
		n = binary.LittleEndian.Uint64(b)
	}
	if n > uint64(len(u.data)-u.pos) {
		return nil, fmt.Errorf("truncated pickle: %d-byte payload runs past the end", n)
	}
	return u.read(int(n))
}

// readLine reads a GLOBAL argument line.
func (u *unpickler) readLine() (string, error) {
	rest := u.data[u.pos:]
	if len(rest) > maxGlobalLine {
		rest = rest[:maxGlobalLine]
	}
	i := bytes.IndexByte(rest, '\n')
	if i < 0 && u.pos+len(rest) == len(u.data) {
		return "", errPickleTruncated
	}
	if i < 0 {
		return "", fmt.Errorf("GLOBAL argument has no newline within %d bytes", len(rest))
	}
	u.pos += i + 1
	return string(rest[:i]), nil
}

// decodeLong decodes a little-endian two's-complement integer of at most 8
// bytes.
func decodeLong(b []byte) (int64, error) {
	if len(b) > 8 {
		return 0, fmt.Errorf("%d-byte integer does not fit in int64", len(b))
	}
	var v uint64
	for i := len(b) - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	if n := len(b); n > 0 && n < 8 && b[n-1]&0x80 != 0 {
		v |= ^uint64(0) << (8 * n) // sign-extend
	}
	return int64(v), nil
}

// segmentLen is the number of values above the innermost MARK.
func (u *unpickler) segmentLen() int {
	if len(u.marks) == 0 {
		return len(u.stack)
	}
	return len(u.stack) - u.marks[len(u.marks)-1]
}

func (u *unpickler) push(v any) error {
	if len(u.stack) >= maxPickleStack {
		return fmt.Errorf("more than %d values on the pickle stack", maxPickleStack)
	}
	u.values++
	if u.values > maxPickleValues {
		return fmt.Errorf("more than %d pickle values", maxPickleValues)
	}
	u.stack = append(u.stack, v)
	return nil
}

func (u *unpickler) pop() (any, error) {
	if u.segmentLen() == 0 {
		return nil, fmt.Errorf("pop from an empty stack")
	}
	v := u.stack[len(u.stack)-1]
	u.stack = u.stack[:len(u.stack)-1]
	return v, nil
}

func (u *unpickler) top() (any, error) {
	if u.segmentLen() == 0 {
		return nil, fmt.Errorf("empty stack")
	}
	return u.stack[len(u.stack)-1], nil
}

// popMark pops the values above the innermost MARK, and the MARK.
func (u *unpickler) popMark() ([]any, error) {
	if len(u.marks) == 0 {
		return nil, fmt.Errorf("no MARK on the stack")
	}
	m := u.marks[len(u.marks)-1]
	u.marks = u.marks[:len(u.marks)-1]
	items := append([]any(nil), u.stack[m:]...)
	u.stack = u.stack[:m]
	return items, nil
}

func (u *unpickler) appendTo(items []any) error {
	v, err := u.top()
	if err != nil {
		return err
	}
	l, ok := v.(*pyList)
	if !ok {
		return fmt.Errorf("APPEND to %s, not a list", typeName(v))
	}
	u.values += len(items)
	if u.values > maxPickleValues {
		return fmt.Errorf("more than %d pickle values", maxPickleValues)
	}
	l.items = append(l.items, items...)
	return nil
}

func (u *unpickler) setItems(items []any) error {
	v, err := u.top()
	if err != nil {
		return err
	}
	d, ok := v.(*pyDict)
	if !ok {
		return fmt.Errorf("SETITEM on %s, not a dict", typeName(v))
	}
	u.values += len(items)
	if u.values > maxPickleValues {
		return fmt.Errorf("more than %d pickle values", maxPickleValues)
	}
	return d.setPairs(items)
}

func newDict() *pyDict { return &pyDict{index: make(map[any]int)} }

// setPairs sets key, value, key, value, ... in order.
func (d *pyDict) setPairs(items []any) error {
	if len(items)%2 != 0 {
		return fmt.Errorf("odd number of dict items (%d)", len(items))
	}
	for i := 0; i < len(items); i += 2 {
		if err := d.set(items[i], items[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// set sets d[k] = v, keeping the first insertion position as Python does.
func (d *pyDict) set(k, v any) error {
	switch k.(type) {
	case nil, bool, int64, float64, string, *pyGlobal:
		if i, ok := d.index[k]; ok {
			d.vals[i] = v
			return nil
		}
		d.index[k] = len(d.keys)
	case pyTuple:
		// Hashable in Python; rare in checkpoints: kept without
		// de-duplication (Go cannot hash a slice).
	default:
		return fmt.Errorf("unhashable dict key of type %s", typeName(k))
	}
	d.keys = append(d.keys, k)
	d.vals = append(d.vals, v)
	return nil
}

// typeName names a VM value's Python type for errors.
func typeName(v any) string {
	switch t := v.(type) {
	case nil:
		return "None"
	case bool:
		return "a bool"
	case int64:
		return "an int"
	case float64:
		return "a float"
	case string:
		return "a str"
	case []byte:
		return "bytes"
	case pyTuple:
		return "a tuple"
	case *pyList:
		return "a list"
	case *pyDict:
		return "a dict"
	case *pyGlobal:
		return fmt.Sprintf("global %s.%s", t.module, t.name)
	case *pyStorage:
		return "a storage"
	case *pyTensor:
		return "a tensor"
	}
	return fmt.Sprintf("%T", v)
}
