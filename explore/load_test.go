package explore

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestLoad sends 200 concurrent API requests (grid, series at several
// zooms, tokens, rows of a few queries, so that row passes queue) to a
// loopback server: every answer must be 200 within 30 s, and the heap
// after the burst must stay within 64 MiB of the heap before it.
func TestLoad(t *testing.T) {
	sw := gated(t)
	_, ts := newTestServer(t, sw.dir, Options{MaxQueue: 64})
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 200}}
	paths := func(i int) string {
		switch i % 5 {
		case 0:
			return fmt.Sprintf("/api/grid?T=%d&metric=neff", []int{24, 40}[i%2])
		case 1:
			return fmt.Sprintf("/api/series?layer=%d&head=%d&from=%d&to=40&buckets=%d", i%3, i%4, i%30, 1+i%50)
		case 2:
			return fmt.Sprintf("/api/tokens?from=%d&to=%d", i%20, 20+i%20)
		case 3:
			return fmt.Sprintf("/api/row?layer=%d&head=%d&query=%d", i%3, i%4, 30+i%7)
		}
		return "/api/info"
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan string, 200)
	for i := range 200 {
		wg.Go(func() {
			resp, err := client.Get(ts.URL + paths(i))
			if err != nil {
				errs <- fmt.Sprintf("%s: %v", paths(i), err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				errs <- fmt.Sprintf("%s: %d %.200s", paths(i), resp.StatusCode, b)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	elapsed := time.Since(start)
	if elapsed > 30*time.Second {
		t.Errorf("200 requests took %v", elapsed)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	t.Logf("200 concurrent requests in %v; heap %d → %d KiB", elapsed, before.HeapAlloc>>10, after.HeapAlloc>>10)
	if after.HeapAlloc > before.HeapAlloc+64<<20 {
		t.Errorf("heap grew from %d to %d KiB", before.HeapAlloc>>10, after.HeapAlloc>>10)
	}
}

// TestStatusWhileARowRuns: while a row's pass runs (slowed to 300 ms a
// block), /api/status long-polled with ?since= reports each block as it
// finishes (layers_done 1, 2 of layers 3 for a row of layer 2), names the
// pass under way, and says where a second request stands (queued, one pass
// ahead of it); once both rows are there it says "cached" and nothing runs.
func TestStatusWhileARowRuns(t *testing.T) {
	sw := gated(t)
	s, ts := newTestServer(t, sw.dir, Options{})
	s.rows.layerDelay = 300 * time.Millisecond
	a, b := RowRequest{T: 24, Layer: 2, Head: 1, Query: 19}, RowRequest{T: 24, Layer: 1, Head: 0, Query: 20}
	param := func(q RowRequest) string {
		return fmt.Sprintf("T=%d&sample=%d&layer=%d&head=%d&query=%d", q.T, q.Sample, q.Layer, q.Head, q.Query)
	}
	codes := make(chan int, 2)
	ask := func(q RowRequest) {
		os.Remove(s.rows.cachePath(q))
		go func() {
			resp, err := http.Get(ts.URL + "/api/row?" + param(q))
			if err != nil {
				codes <- 0
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	var st RowStatus
	// poll long-polls the status of q (each answer after a change, or after
	// statusLongPoll) until cond holds, recording the layers done of a's pass.
	done := map[int]bool{}
	poll := func(q RowRequest, what string, cond func() bool) {
		t.Helper()
		path := "/api/status?" + param(q)
		for start := time.Now(); time.Since(start) < 20*time.Second; {
			if code, body := get(t, ts, path, &st); code != 200 {
				t.Fatalf("%s: %d %s", path, code, body)
			}
			if st.Running != nil && *st.Running == a {
				done[st.LayersDone] = true
			}
			if cond() {
				return
			}
			path = fmt.Sprintf("/api/status?since=%d&%s", st.Version, param(q))
		}
		t.Fatalf("waiting for %s: last status %+v", what, st)
	}
	ask(a)
	poll(a, "a running", func() bool { return st.Request.State == "running" })
	if st.Layers != 3 || st.Tokens != 20 || st.Waiting != 1 {
		t.Errorf("a running: %+v; want layers 3, tokens 20, 1 waiting", st)
	}
	ask(b)
	poll(b, "b queued", func() bool { return st.Request.State == "queued" })
	if st.Request.Ahead != 1 || len(st.Queue) != 1 || st.Queue[0] != b || st.Running == nil || *st.Running != a || st.Waiting != 2 {
		t.Errorf("b queued: %+v, request %+v; want a running, b alone in the queue with 1 ahead", st, *st.Request)
	}
	poll(b, "b running", func() bool { return st.Request.State == "running" })
	if !done[1] || !done[2] {
		t.Errorf("a's pass: layers done seen %v, want 1 and 2 (of 3)", done)
	}
	for range 2 {
		if code := <-codes; code != 200 {
			t.Fatalf("row: %d", code)
		}
	}
	for _, q := range []RowRequest{a, b} {
		get(t, ts, "/api/status?"+param(q), &st)
		if st.Waiting != 0 || st.Running != nil || st.Request.State != "cached" || len(st.Queue) != 0 {
			t.Errorf("after: %+v, request %+v; want nothing running, the row cached", st, *st.Request)
		}
	}
	for _, bad := range []string{"since=x", "since=-1", "query=3&layer=x&head=0", "query=99&layer=0&head=0&T=5"} {
		if code, body := get(t, ts, "/api/status?"+bad, nil); code != 400 {
			t.Errorf("/api/status?%s: %d %s, want 400", bad, code, body)
		}
	}
}
