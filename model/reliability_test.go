package model

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/filterlens/probe/checkpoint"

	"github.com/filterlens/probe/hooks"
)

// Reliability tests of Load on hostile checkpoint directories: every
// refusal names the file and the field, and happens before anything of the
// claimed size is allocated (TotalAlloc is measured around Load).

// relTinyDir writes a valid tiny Qwen3 checkpoint (1 layer, d_model 8,
// 2 heads, vocabulary 16) and returns its directory and config.
func relTinyDir(t *testing.T) (string, Config) {
	t.Helper()
	cfg, err := SmallConfig(ArchQwen3, Size{Layers: 1, DModel: 8, Heads: 2, KVHeads: 1, Vocab: 16, MaxPos: 64})
	if err != nil {
		t.Fatal(err)
	}
	_, dir := writeGenerated(t, cfg, 1)
	return dir, cfg
}

// relAlloc returns the bytes allocated (all goroutines) while fn runs.
func relAlloc(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// relLoadFails loads dir, and fails the test unless Load refuses it with
// an error holding every part, having allocated at most maxAlloc bytes.
func relLoadFails(t *testing.T, dir string, maxAlloc uint64, parts ...string) error {
	t.Helper()
	var err error
	alloc := relAlloc(func() { _, err = Load(dir, LoadOptions{}) })
	if err == nil {
		t.Fatalf("Load accepted %s", dir)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q lacks %q", err, p)
		}
	}
	if alloc > maxAlloc {
		t.Fatalf("Load allocated %d bytes before refusing (limit %d): %v", alloc, maxAlloc, err)
	}
	t.Logf("refused after allocating %.1f KiB: %v", float64(alloc)/1024, err)
	return err
}

// relSafetensors writes a safetensors file from a raw header and data.
func relSafetensors(t *testing.T, path string, header string, data []byte) {
	t.Helper()
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(append(b, header...), data...)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestLoadRefusesHostileSafetensors: lengths, shapes and byte ranges that
// lie are refused with the file, tensor and field named, before the claimed
// sizes are allocated.
func TestLoadRefusesHostileSafetensors(t *testing.T) {
	const small = 4 << 20 // bytes Load may allocate before refusing
	embed := "model.embed_tokens.weight"
	cases := []struct {
		name   string
		header string
		data   int   // bytes of data section
		sparse int64 // when > 0: the file is extended (sparse) to this size
		rawLen uint64
		want   []string
	}{
		{name: "header length past the file", rawLen: 1 << 62, header: "{}",
			want: []string{"header length 4611686018427387904 exceeds the file"}},
		{name: "header length past the limit", rawLen: 100<<20 + 1, header: "{}", sparse: 101 << 20,
			want: []string{"header length 104857601 exceeds the 104857600-byte limit"}},
		{name: "tensor past the end", header: `{"` + embed + `":{"dtype":"F32","shape":[16,8],"data_offsets":[0,512]}}`, data: 64,
			want: []string{`tensor "` + embed + `"`, "data_offsets [0, 512] exceed the data section (64 bytes)"}},
		{name: "huge tensor past the end", header: `{"` + embed + `":{"dtype":"F32","shape":[1099511627776,1024],"data_offsets":[0,4503599627370496]}}`, data: 64,
			want: []string{"exceed the data section"}},
		{name: "shape product overflows", header: `{"` + embed + `":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,16]}}`, data: 16,
			want: []string{`tensor "` + embed + `"`, "overflows int64 bytes"}},
		{name: "shape disagrees with the range", header: `{"` + embed + `":{"dtype":"F32","shape":[1048576,1048576],"data_offsets":[0,16]}}`, data: 16,
			want: []string{"needs 4398046511104 bytes but data_offsets [0, 16] span 16"}},
		{name: "overlapping tensors", header: `{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}}`, data: 24,
			want: []string{`tensor "b": data_offsets [8, 24] overlap tensor "a" [0, 16]`}},
		{name: "negative offset", header: `{"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}}`, data: 8,
			want: []string{"data_offsets[0] = -4 is not a non-negative int64"}},
		{name: "negative dimension", header: `{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, data: 8,
			want: []string{"shape[0] = -1 is not a non-negative int64"}},
		{name: "duplicate tensor", header: `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, data: 8,
			want: []string{`duplicate key "a"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, _ := relTinyDir(t)
			path := filepath.Join(dir, "model.safetensors")
			relSafetensors(t, path, c.header, make([]byte, c.data))
			if c.rawLen != 0 {
				f, _ := os.OpenFile(path, os.O_WRONLY, 0)
				f.WriteAt(binary.LittleEndian.AppendUint64(nil, c.rawLen), 0)
				f.Close()
			}
			if c.sparse > 0 {
				if err := os.Truncate(path, c.sparse); err != nil {
					t.Fatal(err)
				}
			}
			relLoadFails(t, dir, small, append([]string{path}, c.want...)...)
		})
	}
}

// relPickle writes the protocol-2 opcodes of a torch.save state dict by
// hand: {name: _rebuild_tensor_v2(storage, offset, size, stride, False,
// OrderedDict())} for each tensor, with extra raw opcodes spliced in
// before the closing SETITEMS when given.
type relPickle struct{ b bytes.Buffer }

func (p *relPickle) raw(s string) *relPickle { p.b.WriteString(s); return p }

// unicode writes BINUNICODE.
func (p *relPickle) unicode(s string) *relPickle {
	p.b.WriteByte('X')
	p.b.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(s))))
	p.b.WriteString(s)
	return p
}

// long writes LONG1 with 8 bytes (any int64).
func (p *relPickle) long(n int64) *relPickle {
	p.b.Write([]byte{0x8a, 8})
	p.b.Write(binary.LittleEndian.AppendUint64(nil, uint64(n)))
	return p
}

// tuple writes MARK, the ints, TUPLE.
func (p *relPickle) tuple(ns ...int64) *relPickle {
	p.b.WriteByte('(')
	for _, n := range ns {
		p.long(n)
	}
	p.b.WriteByte('t')
	return p
}

// relTensor is one tensor of a relPickle state dict.
type relTensor struct {
	name, key, storage string // storage class, e.g. FloatStorage
	numel              int64
	size, stride       []int64
}

func (p *relPickle) tensor(x relTensor) *relPickle {
	p.unicode(x.name)
	p.raw("ctorch._utils\n_rebuild_tensor_v2\n(")
	p.raw("(").unicode("storage").raw("ctorch\n" + x.storage + "\n").unicode(x.key).unicode("cpu").long(x.numel).raw("tQ")
	p.long(0).tuple(x.size...).tuple(x.stride...)
	return p.raw("\x89ccollections\nOrderedDict\n)RtR")
}

// relStateDict returns a state dict pickle of ts, with extra opcodes (a key
// and a value) added as one more entry when extra is not empty.
func relStateDict(ts []relTensor, extra string) []byte {
	p := &relPickle{}
	p.raw("\x80\x02}(")
	for _, x := range ts {
		p.tensor(x)
	}
	p.raw(extra)
	p.raw("u.")
	return p.b.Bytes()
}

// relEntry is one member of a hand-made torch zip.
type relEntry struct {
	name string
	data []byte
	// deflate compresses the member; claim, when non-zero, is the
	// uncompressed size written in its headers instead of the true one.
	deflate bool
	claim   uint64
}

// relTorchZip writes a torch.save-style zip archive.
func relTorchZip(t *testing.T, path string, entries []relEntry) {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		if !e.deflate {
			w, err := zw.CreateHeader(&zip.FileHeader{Name: e.name, Method: zip.Store})
			if err != nil {
				t.Fatal(err)
			}
			w.Write(e.data)
			continue
		}
		var comp bytes.Buffer
		fw, _ := flate.NewWriter(&comp, flate.BestCompression)
		fw.Write(e.data)
		fw.Close()
		size := uint64(len(e.data))
		if e.claim != 0 {
			size = e.claim
		}
		w, err := zw.CreateRaw(&zip.FileHeader{Name: e.name, Method: zip.Deflate, CRC32: crc32.ChecksumIEEE(e.data),
			CompressedSize64: uint64(comp.Len()), UncompressedSize64: size})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(comp.Bytes())
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// relTorchDir returns a checkpoint directory holding the tiny config and a
// pytorch_model.bin made of entries (no model.safetensors).
func relTorchDir(t *testing.T, entries []relEntry) (dir, bin string) {
	t.Helper()
	dir, _ = relTinyDir(t)
	os.Remove(filepath.Join(dir, "model.safetensors"))
	bin = filepath.Join(dir, "pytorch_model.bin")
	relTorchZip(t, bin, entries)
	return dir, bin
}

// TestLoadRefusesZipBombs: PyTorch zip members and views that claim far
// more than the file can hold are refused before allocation, through Load.
func TestLoadRefusesZipBombs(t *testing.T) {
	const small = 4 << 20
	embed := relTensor{name: "model.embed_tokens.weight", key: "0", storage: "FloatStorage", numel: 128,
		size: []int64{16, 8}, stride: []int64{8, 1}}
	zeros := make([]byte, 512)
	t.Run("storage claims 1 TiB", func(t *testing.T) {
		x := embed
		x.numel = 1 << 38
		dir, bin := relTorchDir(t, []relEntry{{name: "archive/data.pkl", data: relStateDict([]relTensor{x}, "")},
			{name: "archive/data/0", data: make([]byte, 1<<16), deflate: true, claim: 1 << 40}})
		relLoadFails(t, dir, small, bin, `storage "0": compressed entry archive/data/0 declares 1099511627776 bytes uncompressed (limit 1073741824`)
	})
	t.Run("more than deflate can produce", func(t *testing.T) {
		x := embed
		x.numel = 1 << 26
		dir, bin := relTorchDir(t, []relEntry{{name: "archive/data.pkl", data: relStateDict([]relTensor{x}, "")},
			{name: "archive/data/0", data: zeros[:16], deflate: true, claim: 1 << 28}})
		relLoadFails(t, dir, small, bin, "more than deflate can produce")
	})
	t.Run("data.pkl claims 2 GiB", func(t *testing.T) {
		dir, bin := relTorchDir(t, []relEntry{{name: "archive/data.pkl", data: make([]byte, 1<<12), deflate: true, claim: 2 << 30}})
		relLoadFails(t, dir, small, bin, "data.pkl: entry declares 2147483648 bytes (limit 1073741824)")
	})
	t.Run("member inflates past its claim", func(t *testing.T) {
		// The embedding's member claims its 512 bytes but inflates to
		// 4 MiB more: reading stops at the claim, so the model loads with
		// the claimed values and no more is inflated or allocated.
		dir, _ := relTinyDir(t)
		st, err := checkpoint.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		var ts []relTensor
		var entries []relEntry
		want := map[string][]float32{}
		for i, name := range st.Names() {
			info, _ := st.Info(name)
			raw, _ := st.Bytes(name)
			want[name], _ = st.Float32(name)
			x := relTensor{name: name, key: fmt.Sprint(i), storage: "FloatStorage", numel: int64(len(raw) / 4)}
			stride := int64(1)
			x.size = make([]int64, len(info.Shape))
			x.stride = make([]int64, len(info.Shape))
			for d := len(info.Shape) - 1; d >= 0; d-- {
				x.size[d], x.stride[d] = int64(info.Shape[d]), stride
				stride *= int64(info.Shape[d])
			}
			ts = append(ts, x)
			e := relEntry{name: "archive/data/" + x.key, data: raw}
			if name == "model.embed_tokens.weight" {
				e = relEntry{name: e.name, data: append(raw, make([]byte, 4<<20)...), deflate: true, claim: uint64(len(raw))}
			}
			entries = append(entries, e)
		}
		st.Close()
		os.Remove(filepath.Join(dir, "model.safetensors"))
		relTorchZip(t, filepath.Join(dir, "pytorch_model.bin"), append(entries, relEntry{name: "archive/data.pkl", data: relStateDict(ts, "")}))
		var m *Model
		alloc := relAlloc(func() { m, err = Load(dir, LoadOptions{}) })
		if err != nil {
			t.Fatal(err)
		}
		if alloc > small || !slices.Equal(m.Embed.F32, want["model.embed_tokens.weight"]) {
			t.Fatalf("allocated %d bytes (limit %d); embedding read as claimed: %v", alloc, small,
				slices.Equal(m.Embed.F32, want["model.embed_tokens.weight"]))
		}
	})
	t.Run("broadcast view of 2^40 elements", func(t *testing.T) {
		x := embed
		x.numel, x.size, x.stride = 4, []int64{1 << 40}, []int64{0}
		dir, bin := relTorchDir(t, []relEntry{{name: "archive/data.pkl", data: relStateDict([]relTensor{x}, "")},
			{name: "archive/data/0", data: zeros[:16]}})
		relLoadFails(t, dir, small, bin, `tensor "model.embed_tokens.weight"`, "more than its storage")
	})
	t.Run("view past its storage", func(t *testing.T) {
		x := embed
		x.numel = 4
		dir, bin := relTorchDir(t, []relEntry{{name: "archive/data.pkl", data: relStateDict([]relTensor{x}, "")},
			{name: "archive/data/0", data: zeros[:16]}})
		relLoadFails(t, dir, small, bin, `tensor "model.embed_tokens.weight"`, "needs 128 elements but storage archive/data/0 holds 4")
	})
	t.Run("index overflow", func(t *testing.T) {
		x := embed
		x.numel, x.size, x.stride = 4, []int64{2, 2}, []int64{math.MaxInt64, 1}
		dir, _ := relTorchDir(t, []relEntry{{name: "archive/data.pkl", data: relStateDict([]relTensor{x}, "")},
			{name: "archive/data/0", data: zeros[:16]}})
		relLoadFails(t, dir, small, "overflows int64 element indices")
	})
}

// TestLoadRefusesHugeConfigs: a config.json that claims sizes the
// checkpoint does not hold is refused without allocating them (before the
// fix, Load asked the runtime for terabytes of stand-in zeros and died).
func TestLoadRefusesHugeConfigs(t *testing.T) {
	// a layer record per layer (1456 bytes since Gemma 4's per-layer head
	// shape, value path, KV sharing and layer scale; 16384 layers: 24 MB,
	// 51 MB allocated in all before the refusal, measured), and the
	// stand-ins (maxStandIn)
	const limit = 56 << 20
	cases := []struct {
		name string
		edit map[string]any
		want string
	}{
		{"product overflows int64", map[string]any{"hidden_size": 1 << 40, "vocab_size": 1 << 40},
			"embedding (vocabulary × model width) = 1099511627776 × 1099511627776 elements exceeds"},
		{"heads × head_dim wraps", map[string]any{"num_attention_heads": 1 << 32, "num_key_value_heads": 1 << 32, "head_dim": 1 << 32},
			"attention heads × head dimension"},
		{"2^39-element embedding", map[string]any{"vocab_size": 1 << 36},
			`stopped checking at tensor "model.embed_tokens.weight": config.json asks for shape [68719476736 8]`},
		{"2^35-element MLP", map[string]any{"intermediate_size": 1 << 32},
			`expected shape [4294967296 8] from config.json, found [24 8]`},
		{"a million layers", map[string]any{"num_hidden_layers": 1 << 20}, "layers = 1048576 exceeds 16384"},
		{"16384 layers of which one is stored", map[string]any{"num_hidden_layers": 1 << 14}, "missing tensors: model.layers.1."},
		{"negative epsilon", map[string]any{"rms_norm_eps": -1}, "norm epsilon -1 must be finite and ≥ 0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, _ := relTinyDir(t)
			path := filepath.Join(dir, "config.json")
			var cfg map[string]any
			data, _ := os.ReadFile(path)
			json.Unmarshal(data, &cfg)
			for k, v := range c.edit {
				cfg[k] = v
			}
			data, _ = json.Marshal(cfg)
			os.WriteFile(path, data, 0o644)
			relLoadFails(t, dir, limit, dir, c.want)
		})
	}
	// A family-specific size (BFT's τ MLP width) is bounded by the
	// stand-in limit.
	bcfg, err := SmallConfig(ArchBFT, Size{Layers: 1, DModel: 8, Heads: 2, KVHeads: 1, Vocab: 16, MaxPos: 64})
	if err != nil {
		t.Fatal(err)
	}
	gen, b := bcfg, *bcfg.BFT
	b.InitialPrecision, b.TauHidden = "mlp", 4
	gen.BFT = &b
	_, tensors, err := Generate(gen, 1) // the checkpoint: a τ MLP 4 wide
	if err != nil {
		t.Fatal(err)
	}
	huge := b
	huge.TauHidden = 1 << 30
	bcfg.BFT = &huge // its config.json: 2^30 wide
	dir := t.TempDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteHF(dir, bcfg, tensors); err != nil {
		t.Fatal(err)
	}
	relLoadFails(t, dir, limit, "model.bft.tau_mlp.0.weight", "stopped checking")
}

// relForbidden are pickles that reach for code: the global they name, and
// the opcodes that name it (a GLOBAL line, a protocol-4 STACK_GLOBAL, INST,
// or one hidden inside a state dict).
var relForbidden = []struct{ global, pickle string }{
	{"os.system", "\x80\x02cos\nsystem\nX\x05\x00\x00\x00CMD()\x85R."},
	{"posix.system", "\x80\x02cposix\nsystem\nX\x05\x00\x00\x00CMD()\x85R."},
	{"nt.system", "\x80\x02cnt\nsystem\nX\x05\x00\x00\x00CMD()\x85R."},
	{"builtins.eval", "\x80\x02cbuiltins\neval\nX\x05\x00\x00\x00CMD()\x85R."},
	{"builtins.exec", "\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00\x8c\x08builtins\x8c\x04exec\x93X\x05\x00\x00\x00CMD()\x85R."},
	{"builtins.__import__", "\x80\x02cbuiltins\n__import__\nX\x02\x00\x00\x00os\x85R."},
	{"builtins.getattr", "\x80\x02cbuiltins\ngetattr\n."},
	{"__builtin__.open", "\x80\x02c__builtin__\nopen\nX\x03\x00\x00\x00/x\x85R."},
	{"subprocess.Popen", "\x80\x02(csubprocess\nPopen\nX\x05\x00\x00\x00CMD()i."},
	{"subprocess.check_output", "\x80\x02csubprocess\ncheck_output\nX\x05\x00\x00\x00CMD()\x85R."},
	{"shutil.rmtree", "\x80\x02cshutil\nrmtree\nX\x01\x00\x00\x00/\x85R."},
	{"runpy._run_code", "\x80\x02crunpy\n_run_code\n."},
	{"pty.spawn", "\x80\x02cpty\nspawn\n."},
	{"webbrowser.open", "\x80\x02cwebbrowser\nopen\n."},
	{"socket.create_connection", "\x80\x02csocket\ncreate_connection\n."},
	{"pickle.loads", "\x80\x02cpickle\nloads\n."},
	{"_pickle.loads", "\x80\x02c_pickle\nloads\n."},
	{"numpy.core.multiarray._reconstruct", "\x80\x02cnumpy.core.multiarray\n_reconstruct\n."},
	{"torch.load", "\x80\x02ctorch\nload\n."},
	{"torch.storage._load_from_bytes", "\x80\x02ctorch.storage\n_load_from_bytes\n."},
	{"torch._utils._rebuild_tensor_v2x", "\x80\x02ctorch._utils\n_rebuild_tensor_v2x\n."},
}

// relCanaryPickle returns pickle with CMD replaced by a shell command that
// would create canary, were anything executed.
func relCanaryPickle(pickle, canary string) []byte {
	cmd := "touch " + canary
	return []byte(strings.Replace(pickle, "\x05\x00\x00\x00CMD()", string(binary.LittleEndian.AppendUint32(nil, uint32(len(cmd))))+cmd, 1))
}

// TestLoadRefusesForbiddenGlobals: through Load, a data.pkl naming a global
// outside the allowlist fails with ErrForbiddenGlobal and the global's
// name, and nothing runs; also when the global hides inside an otherwise
// valid state dict.
func TestLoadRefusesForbiddenGlobals(t *testing.T) {
	for _, c := range relForbidden {
		t.Run(c.global, func(t *testing.T) {
			canary := filepath.Join(t.TempDir(), "pwned")
			dir, bin := relTorchDir(t, []relEntry{{name: "archive/data.pkl", data: relCanaryPickle(c.pickle, canary)},
				{name: "archive/version", data: []byte("3\n")}})
			err := relLoadFails(t, dir, 1<<20, bin, `data.pkl: forbidden pickle global "`+c.global+`"`)
			if !errors.Is(err, checkpoint.ErrForbiddenGlobal) {
				t.Errorf("%v is not ErrForbiddenGlobal", err)
			}
			if _, err := os.Stat(canary); err == nil {
				t.Fatal("the pickle's command ran")
			}
		})
	}
	// Hidden as the value of one more entry of a valid state dict.
	embed := relTensor{name: "model.embed_tokens.weight", key: "0", storage: "FloatStorage", numel: 128,
		size: []int64{16, 8}, stride: []int64{8, 1}}
	canary := filepath.Join(t.TempDir(), "pwned")
	cmd := "touch " + canary
	extra := (&relPickle{}).unicode("_metadata").raw("cos\nsystem\n").unicode(cmd).raw("\x85R").b.String()
	dir, bin := relTorchDir(t, []relEntry{{name: "archive/data.pkl", data: relStateDict([]relTensor{embed}, extra)},
		{name: "archive/data/0", data: make([]byte, 512)}})
	relLoadFails(t, dir, 1<<20, bin, `forbidden pickle global "os.system"`)
	if _, err := os.Stat(canary); err == nil {
		t.Fatal("the pickle's command ran")
	}
}

// TestLoadRefusesShardsOutsideTheDirectory: a sharded index may only name
// plain files beside it.
func TestLoadRefusesShardsOutsideTheDirectory(t *testing.T) {
	for _, shard := range []string{"../model.safetensors", "/etc/passwd", "sub/model.safetensors", `..\model.safetensors`, "..", ""} {
		dir, _ := relTinyDir(t)
		index := filepath.Join(dir, "model.safetensors.index.json")
		data, _ := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": map[string]string{"model.norm.weight": shard}})
		os.WriteFile(index, data, 0o644)
		want, _ := json.Marshal(shard)
		relLoadFails(t, dir, 1<<20, index, `weight_map: tensor "model.norm.weight": shard `+string(want)+` is not a plain file name`)
	}
}

// TestForwardNamesTheFault: a NaN or Inf in a weight is reported at the
// first layer, head and position it reaches, and Forward fails.
func TestForwardNamesTheFault(t *testing.T) {
	cfg, err := SmallConfig(ArchGated, Size{Layers: 3, DModel: 32, Heads: 4, KVHeads: 2, Vocab: 64, MaxPos: 256})
	if err != nil {
		t.Fatal(err)
	}
	ids := [][]int{{3, 9, 27, 17, 51, 25, 11, 33}}
	dh := cfg.DHead
	cases := []struct {
		name   string
		poison func(m *Model)
		want   string
	}{
		{"query row of head 2 in layer 1", func(m *Model) { L := &m.Layers[1]; L.Wq.F32[L.Wq.rowAt(2*dh+1)+5] = float32(math.NaN()) },
			"in the attention output of layer 1, head 2, at batch 0 position 0"},
		{"value row of KV head 1 in layer 2", func(m *Model) { m.Layers[2].Wv.F32[(1*dh+3)*cfg.DModel] = float32(math.Inf(1)) },
			"in the attention output of layer 2, head 2, at batch 0 position 0"},
		{"embedding of the token at position 4", func(m *Model) { m.Embed.F32[51*cfg.DModel+7] = float32(math.NaN()) },
			"in the attention output of layer 0, head 0, at batch 0 position 4"},
		{"output projection of layer 0", func(m *Model) { m.Layers[0].Wo.F32[3*cfg.Heads*dh+1] = float32(math.Inf(-1)) },
			"after the attention output projection of layer 0 at batch 0 position 0 dim 3"},
		{"MLP of layer 1", func(m *Model) { m.Layers[1].WDown.F32[6*cfg.DMLP] = float32(math.NaN()) },
			"in the residual stream after layer 1 at batch 0 position 0 dim 6"},
	}
	for _, c := range cases {
		for _, pattern := range []bool{false, true} {
			name := c.name
			if pattern {
				name += ", hook_pattern captured" // z from the materialized pattern (patternTimesV)
			}
			t.Run(name, func(t *testing.T) {
				m, _, err := Generate(cfg, 5)
				if err != nil {
					t.Fatal(err)
				}
				c.poison(m)
				var opt Options
				if pattern {
					hs := &hooks.Set{}
					hs.Capture("blocks.*.attn.hook_pattern")
					opt.Hooks = hs
				}
				_, err = m.Forward(ids, opt)
				if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "non-finite") {
					t.Fatalf("error %v, want one containing %q", err, c.want)
				}
			})
		}
	}
}
