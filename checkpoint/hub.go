package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// HubModel says where ResolveModel found a checkpoint in the Hugging Face
// hub cache.
type HubModel struct {
	Repo     string `json:"repo"`     // org/name as given
	Revision string `json:"revision"` // as asked: main (default), a branch, a tag or a commit
	Commit   string `json:"commit"`   // the snapshot folder's name
	Cache    string `json:"cache"`    // the hub cache folder
	Dir      string `json:"dir"`      // the snapshot folder: Cache/models--org--name/snapshots/Commit
}

// String returns org/name@commit.
func (h *HubModel) String() string { return h.Repo + "@" + h.Commit }

// hubRepoID is what a hub model id looks like: org/name, each part of
// letters, digits, '-', '_' and '.', not starting with '.' or '-'.
var hubRepoID = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*/[A-Za-z0-9_][A-Za-z0-9_.-]*$`)

// IsHubID reports whether name looks like a hub model id org/name.
func IsHubID(name string) bool { return hubRepoID.MatchString(name) && !strings.Contains(name, "..") }

// HubCacheDir returns the Hugging Face hub cache folder the way
// huggingface_hub chooses it, and the setting that chose it:
// $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub,
// else ~/.cache/huggingface/hub.
func HubCacheDir() (dir, from string) {
	if d := os.Getenv("HF_HUB_CACHE"); d != "" {
		return d, "$HF_HUB_CACHE"
	}
	if d := os.Getenv("HF_HOME"); d != "" {
		return filepath.Join(d, "hub"), "$HF_HOME/hub"
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "huggingface", "hub"), "$XDG_CACHE_HOME/huggingface/hub"
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join("~", ".cache", "huggingface", "hub"), "~/.cache/huggingface/hub (no home folder: " + err.Error() + ")"
	}
	return filepath.Join(home, ".cache", "huggingface", "hub"), "~/.cache/huggingface/hub"
}

// ResolveModel returns the folder of the checkpoint that name stands for,
// without the network. A name that is an existing file or folder is
// returned as it is (hub is nil). A name that looks like a hub model id
// org/name is looked up in the hub cache (HubCacheDir):
// models--org--name/snapshots/<commit>, where commit is read from
// refs/<revision> (revision "" means main) or, when no such ref exists, is
// the revision itself (a full commit hash, or a prefix of at least 7 hex
// digits naming one snapshot). Snapshot files are usually symbolic links
// into the entry's blobs/ folder; they are read through the links.
//
// When nothing is found the error lists every place it looked and what to
// do; a ref that points at a missing snapshot is refused naming the ref
// file.
func ResolveModel(name, revision string) (dir string, hub *HubModel, err error) {
	if name == "" {
		return "", nil, errors.New("no model given")
	}
	if _, err := os.Stat(name); err == nil {
		if revision != "" {
			return "", nil, fmt.Errorf("%s is a folder on disk: a revision selects a snapshot of a hub model id (org/name) only; leave it out", name)
		}
		return name, nil, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", nil, fmt.Errorf("model %s: %w", name, err)
	} else if !IsHubID(name) {
		return "", nil, fmt.Errorf("model %s: no such folder (a model is a checkpoint folder, or a hub model id org/name found in the Hugging Face cache)", name)
	}
	if revision == "" {
		revision = "main"
	}
	if strings.Contains(revision, "..") || filepath.IsAbs(revision) || strings.ContainsRune(revision, '\\') {
		return "", nil, fmt.Errorf("revision %q: want a branch, tag or commit hash", revision)
	}
	cache, from := HubCacheDir()
	repo := filepath.Join(cache, "models--"+strings.ReplaceAll(name, "/", "--"))
	h := &HubModel{Repo: name, Revision: revision, Cache: cache}
	looked := []string{fmt.Sprintf("%s (not a file or folder here)", name),
		fmt.Sprintf("hub cache %s (from %s)", cache, from)}
	notFound := func(last string) error {
		looked = append(looked, last)
		return fmt.Errorf("model %s (revision %s) is not on disk; looked in:\n  %s\nto fix: download it once (e.g. `hf download %s`; probe never uses the network), point HF_HUB_CACHE or HF_HOME at the cache that holds it, or pass the checkpoint folder itself",
			name, revision, strings.Join(looked, "\n  "), name)
	}
	if st, err := os.Stat(repo); err != nil || !st.IsDir() {
		return "", nil, notFound(repo + ": no such folder")
	}
	snapshots := filepath.Join(repo, "snapshots")
	ref := filepath.Join(repo, "refs", filepath.FromSlash(revision))
	if b, err := os.ReadFile(ref); err == nil {
		commit := strings.TrimSpace(string(b))
		if commit == "" || strings.ContainsAny(commit, `/\`) || strings.Contains(commit, "..") {
			return "", nil, fmt.Errorf("%s: want a commit hash, found %q; download %s again", ref, commit, name)
		}
		h.Commit, h.Dir = commit, filepath.Join(snapshots, commit)
		if st, err := os.Stat(h.Dir); err != nil || !st.IsDir() {
			return "", nil, fmt.Errorf("%s points at commit %s, but its snapshot %s is missing (an interrupted or pruned download): download %s again, or pass --revision with a commit among the snapshots (%s)",
				ref, commit, h.Dir, name, listSnapshots(snapshots))
		}
		return h.Dir, h, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", nil, fmt.Errorf("%s: %w", ref, err)
	}
	looked = append(looked, ref+": no such ref")
	if commit, err := matchSnapshot(snapshots, revision); err != nil {
		return "", nil, err
	} else if commit != "" {
		h.Commit, h.Dir = commit, filepath.Join(snapshots, commit)
		return h.Dir, h, nil
	}
	return "", nil, notFound(fmt.Sprintf("%s: no snapshot named %s (have: %s)", snapshots, revision, listSnapshots(snapshots)))
}

// hexPrefix is a commit hash or an abbreviation of one.
var hexPrefix = regexp.MustCompile(`^[0-9a-f]{7,64}$`)

// matchSnapshot returns the snapshot folder that revision names: its
// whole name, or a hex prefix of at least 7 digits shared with exactly one
// snapshot. It returns "" when none matches.
func matchSnapshot(snapshots, revision string) (string, error) {
	if st, err := os.Stat(filepath.Join(snapshots, revision)); err == nil && st.IsDir() {
		return revision, nil
	}
	if !hexPrefix.MatchString(revision) {
		return "", nil
	}
	var hits []string
	for _, s := range snapshotNames(snapshots) {
		if strings.HasPrefix(s, revision) {
			hits = append(hits, s)
		}
	}
	if len(hits) > 1 {
		return "", fmt.Errorf("revision %s: matches %d snapshots in %s (%s); give more digits", revision, len(hits), snapshots, strings.Join(hits, ", "))
	}
	if len(hits) == 1 {
		return hits[0], nil
	}
	return "", nil
}

// snapshotNames lists the snapshot folders, sorted.
func snapshotNames(snapshots string) []string {
	ents, _ := os.ReadDir(snapshots)
	var names []string
	for _, e := range ents {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names
}

// listSnapshots returns the snapshot folder names for an error message.
func listSnapshots(snapshots string) string {
	names := snapshotNames(snapshots)
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
