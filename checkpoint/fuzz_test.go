package checkpoint

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzSafetensorsHeader parses arbitrary headers in front of a data section
// of dataLen zero bytes and reads every tensor that is accepted. It must never
// panic, and what it accepts must be self-consistent. Seeds live in
// testdata/fuzz/FuzzSafetensorsHeader.
func FuzzSafetensorsHeader(f *testing.F) {
	f.Add([]byte(`{"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}`), uint16(16))
	f.Add([]byte(`{"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[3],"data_offsets":[2,8]}}`), uint16(8))
	f.Fuzz(func(t *testing.T, header []byte, dataLen uint16) {
		var file bytes.Buffer
		binary.Write(&file, binary.LittleEndian, uint64(len(header)))
		file.Write(header)
		file.Write(make([]byte, dataLen))
		c, err := openReader("fuzz.safetensors", bytes.NewReader(file.Bytes()), int64(file.Len()))
		if err != nil {
			return
		}
		var spans [][2]int64
		for _, name := range c.Names() {
			tn := c.tensors[name]
			info, ok := c.Info(name)
			if !ok || info.Name != name || dtypeSize(info.DType) == 0 {
				t.Fatalf("bad info %+v", info)
			}
			src := tn.src.(sectionSource)
			if src.base < 8+int64(len(header)) || src.base+src.n > int64(file.Len()) || src.n != tn.numel*tn.elemSize {
				t.Fatalf("%s: range [%d, +%d) outside the data section", name, src.base, src.n)
			}
			for _, s := range spans {
				if src.n > 0 && src.base < s[1] && s[0] < src.base+src.n {
					t.Fatalf("%s overlaps another tensor", name)
				}
			}
			if src.n > 0 {
				spans = append(spans, [2]int64{src.base, src.base + src.n})
			}
			v, err := c.Float64(name)
			if err != nil || int64(len(v)) != tn.numel {
				t.Fatalf("%s: read %d values, %v", name, len(v), err)
			}
		}
	})
}

// FuzzPickle runs arbitrary pickles through the VM with in-memory storages,
// collects the state dict and reads every tensor. It must never panic or
// allocate without bound. Seeds (the golden data.pkl among them) live in
// testdata/fuzz/FuzzPickle.
func FuzzPickle(f *testing.F) {
	f.Add([]byte("\x80\x02cos\nsystem\nq\x00X\x02\x00\x00\x00lsq\x01\x85q\x02Rq\x03."))
	f.Add(statePickle([]tt{{name: "w", key: "0", class: "FloatStorage", numel: 6, offset: 1, shape: []int64{2, 2}, stride: []int64{1, 2}}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		root, err := unpickle(data, fakeStorages)
		if err != nil {
			return
		}
		c := &Checkpoint{format: FormatPyTorch, files: []string{"fuzz.bin"}}
		if err := c.collect("fuzz.bin", root); err != nil {
			return
		}
		c.finish()
		for _, name := range c.Names() {
			tn := c.tensors[name]
			if tn.numel > 1<<12 {
				continue // legal, but too slow to read on every exec
			}
			v, err := c.Float32(name)
			if err != nil || int64(len(v)) != tn.numel {
				t.Fatalf("%s: read %d values, %v", name, len(v), err)
			}
		}
		_ = c.Extra()
	})
}

// FuzzOpenFile opens arbitrary whole files (zip archives, safetensors, junk)
// and reads every accepted tensor.
func FuzzOpenFile(f *testing.F) {
	var zbuf bytes.Buffer
	zw := zip.NewWriter(&zbuf)
	pick := statePickle([]tt{{name: "w", key: "0", class: "FloatStorage", numel: 4, shape: []int64{2, 2}, stride: []int64{1, 2}}})
	for _, e := range torchEntries("archive", pick, map[string][]byte{"0": f32bytes(1, 2, 3, 4)}) {
		w, _ := zw.CreateHeader(&zip.FileHeader{Name: e.name, Method: zip.Store})
		w.Write(e.data)
	}
	w, _ := zw.CreateHeader(&zip.FileHeader{Name: "archive/byteorder", Method: zip.Deflate})
	w.Write([]byte("little"))
	zw.Close()
	f.Add(zbuf.Bytes())
	hdr := `{"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}}`
	f.Add(append(binary.LittleEndian.AppendUint64(nil, uint64(len(hdr))), hdr+"\x00\x3c\x00\x7c"...))
	f.Add([]byte("\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19."))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := openReader("fuzz.bin", bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		for _, name := range c.Names() {
			if tn := c.tensors[name]; tn.numel <= 1<<12 {
				// Data of accepted tensors lie within the file; only
				// lying deflate streams may fail at read time.
				_, err := c.Float64(name)
				if _, stored := tn.src.(sectionSource); err != nil && stored {
					t.Fatalf("%s: %v", name, err)
				}
			}
		}
	})
}
