package checkpoint

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeHubEntry lays out models--org--name in cache the way huggingface_hub
// does: the files in blobs/ named by a hash, each snapshot file a relative
// symbolic link ../../blobs/<hash>, refs/main holding the commit. The
// checkpoint is sharded (two safetensors shards and an index).
func fakeHubEntry(t *testing.T, cache, repo, commit string) string {
	t.Helper()
	entry := filepath.Join(cache, "models--"+strings.ReplaceAll(repo, "/", "--"))
	blobs := filepath.Join(entry, "blobs")
	snap := filepath.Join(entry, "snapshots", commit)
	for _, d := range []string{blobs, snap, filepath.Join(entry, "refs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := func(name, blob string) {
		if err := os.Symlink(filepath.Join("..", "..", "blobs", blob), filepath.Join(snap, name)); err != nil {
			t.Fatal(err)
		}
	}
	shards := []struct {
		file, blob string
		t          Tensor
	}{
		{"model-00001-of-00002.safetensors", "b1", Tensor{Name: "a", Shape: []int{2, 2}, Data: []float32{1, 2, 3, 4}}},
		{"model-00002-of-00002.safetensors", "b2", Tensor{Name: "b", Shape: []int{3}, Data: []float32{5, 6, 7}}},
	}
	for _, s := range shards {
		if err := WriteSafetensors(filepath.Join(blobs, s.blob), []Tensor{s.t}, nil); err != nil {
			t.Fatal(err)
		}
		link(s.file, s.blob)
	}
	index := `{"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}`
	os.WriteFile(filepath.Join(blobs, "b3"), []byte(index), 0o644)
	link("model.safetensors.index.json", "b3")
	os.WriteFile(filepath.Join(entry, "refs", "main"), []byte(commit), 0o644)
	return entry
}

func TestResolveModelHubCache(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("HF_HUB_CACHE", cache)
	const c1, c2 = "0123456789abcdef0123456789abcdef01234567", "89abcdef0123456789abcdef0123456789abcdef"
	entry := fakeHubEntry(t, cache, "org/tiny", c1)
	// a second snapshot and a tag pointing at it
	os.MkdirAll(filepath.Join(entry, "snapshots", c2), 0o755)
	os.WriteFile(filepath.Join(entry, "refs", "v1"), []byte(c2+"\n"), 0o644)

	for _, c := range []struct{ revision, commit string }{
		{"", c1}, {"main", c1}, {"v1", c2}, {c2, c2}, {c2[:7], c2}, {c1[:10], c1},
	} {
		dir, hub, err := ResolveModel("org/tiny", c.revision)
		if err != nil {
			t.Fatalf("revision %q: %v", c.revision, err)
		}
		want := filepath.Join(entry, "snapshots", c.commit)
		if dir != want || hub == nil || hub.Commit != c.commit || hub.Repo != "org/tiny" || hub.Cache != cache {
			t.Errorf("revision %q: dir %s, hub %+v; want %s", c.revision, dir, hub, want)
		}
	}

	// The sharded checkpoint opens through the snapshot's symbolic links.
	dir, _, _ := ResolveModel("org/tiny", "")
	ck, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if ck.Format() != FormatSafetensorsSharded || strings.Join(ck.Names(), ",") != "a,b" {
		t.Fatalf("format %s, tensors %v", ck.Format(), ck.Names())
	}
	if b, err := ck.Float32("b"); err != nil || len(b) != 3 || b[2] != 7 {
		t.Errorf("b = %v, %v", b, err)
	}

	// A folder on disk is taken as it is; a revision with it is refused.
	if d, hub, err := ResolveModel(dir, ""); err != nil || d != dir || hub != nil {
		t.Errorf("folder: %s %v %v", d, hub, err)
	}
	if _, _, err := ResolveModel(dir, "main"); err == nil || !strings.Contains(err.Error(), "revision selects a snapshot of a hub model id") {
		t.Errorf("folder with a revision: %v", err)
	}
}

// TestResolveModelErrors: each failure names the places looked at, the
// file at fault and what to do.
func TestResolveModelErrors(t *testing.T) {
	cache := t.TempDir()
	const c1 = "0123456789abcdef0123456789abcdef01234567"
	entry := fakeHubEntry(t, cache, "org/tiny", c1)
	os.MkdirAll(filepath.Join(cache, "models--org--broken", "snapshots", "aaaaaaa1"), 0o755)
	os.MkdirAll(filepath.Join(cache, "models--org--broken", "refs"), 0o755)
	os.WriteFile(filepath.Join(cache, "models--org--broken", "refs", "main"), []byte("ffffffffff"), 0o644)
	os.MkdirAll(filepath.Join(cache, "models--org--two", "snapshots", "abcdef01"), 0o755)
	os.MkdirAll(filepath.Join(cache, "models--org--two", "snapshots", "abcdef02"), 0o755)
	t.Setenv("HF_HUB_CACHE", cache)
	cases := []struct {
		name, revision string
		want           []string
	}{
		{"org/missing", "", []string{"model org/missing (revision main) is not on disk", "hub cache " + cache + " (from $HF_HUB_CACHE)",
			filepath.Join(cache, "models--org--missing") + ": no such folder", "hf download org/missing", "never uses the network"}},
		{"org/tiny", "v9", []string{filepath.Join(entry, "refs", "v9") + ": no such ref", "no snapshot named v9 (have: " + c1 + ")"}},
		{"org/broken", "", []string{filepath.Join(cache, "models--org--broken", "refs", "main") + " points at commit ffffffffff",
			"snapshot " + filepath.Join(cache, "models--org--broken", "snapshots", "ffffffffff") + " is missing", "(aaaaaaa1)"}},
		{"org/two", "abcdef0", []string{"matches 2 snapshots", "abcdef01, abcdef02", "give more digits"}},
		{"no-such-folder", "", []string{"model no-such-folder: no such folder", "hub model id org/name"}},
		{"./a/b", "", []string{"model ./a/b: no such folder"}},
		{"org/tiny", "../../x", []string{`revision "../../x"`}},
	}
	for _, c := range cases {
		_, _, err := ResolveModel(c.name, c.revision)
		if err == nil {
			t.Errorf("%s@%s: no error", c.name, c.revision)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s@%s: error %q\nlacks %q", c.name, c.revision, err, w)
			}
		}
	}
}

func TestHubCacheDir(t *testing.T) {
	cases := []struct{ hubCache, hfHome, xdg, want, from string }{
		{"/a", "/b", "/c", "/a", "$HF_HUB_CACHE"},
		{"", "/b", "/c", "/b/hub", "$HF_HOME/hub"},
		{"", "", "/c", "/c/huggingface/hub", "$XDG_CACHE_HOME/huggingface/hub"},
	}
	for _, c := range cases {
		t.Setenv("HF_HUB_CACHE", c.hubCache)
		t.Setenv("HF_HOME", c.hfHome)
		t.Setenv("XDG_CACHE_HOME", c.xdg)
		if d, from := HubCacheDir(); d != c.want || from != c.from {
			t.Errorf("%+v: got %s from %s", c, d, from)
		}
	}
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "/home/u")
	if d, _ := HubCacheDir(); d != "/home/u/.cache/huggingface/hub" {
		t.Errorf("default: %s", d)
	}
}
